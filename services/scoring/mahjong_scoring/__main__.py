"""`python -m mahjong_scoring`: the scoring service process.

Migrates its database, then runs the service of `mahjong_scoring.app` (its definition: the outbox
relay to `mahjong.settlement.v1`, the tracked consumer of `mahjong.table.v1` that keeps the
settlement projection, and the gRPC `ScoringService`), configured from the MAHJONG_* settings.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from mahjong_platform.config import load_settings
from mahjong_platform.service_runtime import run_service
from mahjong_platform.structured_logging import configure_logging

from mahjong_scoring.app import DEFINITION

__all__ = ["DEFINITION", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the scoring service until SIGTERM or SIGINT; ``rebuild ...``: the admin command of
    `mahjong_scoring.rebuild` instead."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    if arguments[:1] == ["rebuild"]:
        from mahjong_scoring.rebuild import main as rebuild

        return rebuild(arguments[1:])
    settings = load_settings()
    configure_logging(settings)
    return run_service(DEFINITION, settings)


if __name__ == "__main__":
    raise SystemExit(main())
