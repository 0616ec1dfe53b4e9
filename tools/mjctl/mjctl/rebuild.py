"""``mjctl rebuild scoring|ledger``: rebuild a projection from offset 0 and compare it with the live one.

ARCHITECTURE.md: "Rebuild = new empty database + replay from offset 0. It must give identical
rows." The rebuild is the service's own admin command, ``python -m mahjong_scoring rebuild`` or
``python -m mahjong_ledger rebuild`` (`mahjong_platform.rebuild`: the service's migrations, its
input topics read from offset 0 without a consumer group, its own batch handler through the live
consumer's batch path, every projection table compared); this command runs it with the same
options and passes its output and exit code through. mjctl imports no service code: the same
command runs where only the service is installed (its container image).

1. An EMPTY database (default: a temporary SQLite file, deleted afterwards unless ``--keep``;
   ``--database URL`` for PostgreSQL, refused unless it has no tables) is migrated with the
   service's own migration history.
2. The service's input topics are replayed into it (scoring: ``mahjong.table.v1``; ledger:
   ``mahjong.settlement.v1`` and the deposits from ``mahjong.ledger.v1``), progress on stderr.
3. Every projection table is digested in both databases: ``identical`` (exit 0) or the first
   difference: table, key, column, live and rebuilt (exit 1). Exit 2: the rebuild could not run.

What is not compared (and why) is in each service's ``rebuild`` module.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import threading
from typing import IO, Any, Final

from mahjong_platform.rebuild_options import add_rebuild_options, as_arguments

SERVICES: Final = ("ledger", "scoring")


def register(subparsers: Any) -> None:
    """Add ``rebuild`` to the ``mjctl`` command."""
    parser = subparsers.add_parser(
        "rebuild",
        help="replay a service's topics into an empty database and compare with the live projection",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("service", choices=SERVICES, help="the projection to rebuild")
    add_rebuild_options(parser)
    parser.set_defaults(handler=run)


def service_command(arguments: argparse.Namespace) -> list[str]:
    """The service's own rebuild command for these options."""
    return [sys.executable, "-m", f"mahjong_{arguments.service}", "rebuild", *as_arguments(arguments)]


def run(arguments: argparse.Namespace) -> int:
    """The ``rebuild`` subcommand: the service's exit code (0 identical, 1 different, 2 could not run)."""
    module = f"mahjong_{arguments.service}"
    if importlib.util.find_spec(module) is None:  # locates the package without importing it
        print(
            f"mjctl rebuild: the {arguments.service} service is not installed here; run "
            f"`python -m {module} rebuild` where it is (e.g. in its container)",
            file=sys.stderr,
        )
        return 2
    process = subprocess.Popen(service_command(arguments), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    progress = threading.Thread(target=_copy, args=(process.stderr, sys.stderr), daemon=True)
    progress.start()
    _copy(process.stdout, sys.stdout)
    progress.join()
    returncode = process.wait()
    if returncode < 0:  # killed by a signal: neither identical nor different
        print(f"mjctl rebuild: the rebuild was killed by signal {-returncode}", file=sys.stderr)
        return 2
    return returncode


def _copy(source: IO[bytes], target: IO[str]) -> None:
    """Copy as it arrives (the progress bar redraws a line without ending it)."""
    while chunk := source.read1(4096):  # type: ignore[attr-defined]
        target.write(chunk.decode(errors="replace"))
        target.flush()
