"""``mjctl``: the project's command line. Each subcommand lives in its own module.

To add a subcommand, write a module that exposes ``register(subparsers)`` (add a parser and set
``handler`` to a function taking the parsed arguments and returning an exit code) and add the
module to ``SUBCOMMANDS`` below: one line.
"""

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

from mjctl import bots, evaluate, rebuild, reconcile, replay, run, token

SUBCOMMANDS: tuple[ModuleType, ...] = (evaluate, bots, token, run, replay, rebuild, reconcile)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered subcommand."""
    parser = argparse.ArgumentParser(prog="mjctl", description="Happy Mahjong command line.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: the process arguments), run the subcommand, return its exit code."""
    arguments = build_parser().parse_args(argv)
    exit_code: int = arguments.handler(arguments)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
