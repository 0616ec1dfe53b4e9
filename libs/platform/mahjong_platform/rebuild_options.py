"""The options of a rebuild command (`mahjong_platform.rebuild.command`), in a module that imports
nothing heavy: ``mjctl rebuild`` declares the same options before it runs the service's command."""

from __future__ import annotations

import argparse
from typing import Final

FORWARDED: Final = ("database", "live_database", "live_group")
"""The options with a value, as argparse names them (``--live-database`` is ``live_database``)."""


def add_rebuild_options(parser: argparse.ArgumentParser) -> None:
    """``--database URL``, ``--keep``, ``--live-database URL``, ``--live-group GROUP``."""
    parser.add_argument(
        "--database",
        metavar="URL",
        help="an EMPTY database to rebuild into (default: a temporary SQLite file)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary SQLite database; print its URL"
    )
    parser.add_argument(
        "--live-database",
        metavar="URL",
        help="the live database (default: the configured one of the service)",
    )
    parser.add_argument(
        "--live-group", metavar="GROUP", help="the live consumer group (default: the service's own)"
    )


def as_arguments(arguments: argparse.Namespace) -> list[str]:
    """The parsed options as a command line again (for the service's own command)."""
    command: list[str] = []
    for option in FORWARDED:
        value = getattr(arguments, option)
        if value is not None:
            command += [f"--{option.replace('_', '-')}", value]
    if arguments.keep:
        command.append("--keep")
    return command
