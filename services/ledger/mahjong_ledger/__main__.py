"""``python -m mahjong_ledger``: migrate, then serve LedgerService, consume mahjong.settlement.v1 and
relay the outbox to mahjong.ledger.v1, configured from the ``MAHJONG_*`` environment variables."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from mahjong_platform.config import load_settings
from mahjong_platform.structured_logging import configure_logging

from mahjong_ledger.app import LedgerProcess
from mahjong_ledger.settings import load_ledger_settings

logger = logging.getLogger("mahjong_ledger")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ledger until SIGTERM or SIGINT; returns the process exit code. ``rebuild ...``: the
    admin command of `mahjong_ledger.rebuild` instead."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    if arguments[:1] == ["rebuild"]:
        from mahjong_ledger.rebuild import main as rebuild

        return rebuild(arguments[1:])
    settings = load_settings()
    configure_logging(settings)
    ledger_settings = load_ledger_settings()
    process = LedgerProcess(settings, ledger_settings).start()
    assert process.server is not None
    process.server.stop_on_signals()
    try:
        process.server.wait_for_termination()
    finally:
        process.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
