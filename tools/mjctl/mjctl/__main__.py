"""``mjctl``: the project's command line. Each subcommand lives in its own module.

To add a subcommand, write a module that exposes ``register(subparsers)`` (add a parser and set
``handler`` to a function taking the parsed arguments and returning an exit code) and add its name,
module and one-line help to ``SUBCOMMANDS`` below: one line.

Modules are imported lazily: ``mjctl --help`` imports none of them (only the one-line helps below
are shown), ``mjctl replay ...`` imports only ``mjctl.replay``. So a subcommand's heavy imports
(gRPC, Kafka, SQLAlchemy, the rules) never slow the others down.
"""

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NamedTuple

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_OUTPUT_CLOSED = 141


class Subcommand(NamedTuple):
    name: str
    module: str
    help: str


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("evaluate", "mjctl.evaluate", "score a winning hand (JSON in, JSON out)"),
    Subcommand("bots", "mjctl.bots_command", "bots that play games through the public API"),
    Subcommand("token", "mjctl.token", "mint a dev JWT signed with MAHJONG_JWT_SECRET"),
    Subcommand("run", "mjctl.run", "start Kafka and every service, then play a demo"),
    Subcommand("replay", "mjctl.replay", "one table's events in words, full information, with what was paid"),
    Subcommand(
        "rebuild", "mjctl.rebuild", "rebuild a projection from the topics and compare it with the live one"
    ),
    Subcommand("reconcile", "mjctl.reconcile", "check the ledger's books against scoring (finance)"),
    Subcommand("chaos", "mjctl.chaos", "bot games while faults hit every service and the broker"),
    Subcommand("dlq", "mjctl.dlq", "list, show and re-drive dead letters (mahjong.dlq.v1)"),
    Subcommand("play", "mjctl.play", "play one seat in the terminal against three bots"),
)

EPILOG = f"""exit codes:
  {EXIT_OK}    success
  {EXIT_FAILURE}    the command failed or found a problem (it says what on stderr)
  {EXIT_USAGE}    usage error (unknown option, missing or bad argument)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)
  {EXIT_OUTPUT_CLOSED}  the output was closed early (e.g. `mjctl replay ... | head`), quietly

`mjctl COMMAND --help` describes each command and every option."""


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser. Only the `chosen` subcommand's module is imported and registers its
    full parser (``None``: every module, for tests and documentation); the others are listed with
    their one-line help."""
    parser = argparse.ArgumentParser(
        prog="mjctl",
        description="Happy Mahjong command line.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for subcommand in SUBCOMMANDS:
        if chosen is None or subcommand.name == chosen:
            importlib.import_module(subcommand.module).register(subparsers)
        else:
            subparsers.add_parser(subcommand.name, help=subcommand.help)
    return parser


def chosen_subcommand(argv: Sequence[str]) -> str:
    """The subcommand named in `argv` ("" when none is: the top-level help or a usage error)."""
    names = {subcommand.name for subcommand in SUBCOMMANDS}
    for argument in argv:
        if not argument.startswith("-"):
            return argument if argument in names else ""
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: the process arguments), run the subcommand, return its exit code.

    Ctrl-C exits 130 and a closed output (``| head``) exits 141, both without a traceback."""
    arguments_list = list(sys.argv[1:] if argv is None else argv)
    try:
        arguments = build_parser(chosen_subcommand(arguments_list)).parse_args(arguments_list)
        exit_code: int = arguments.handler(arguments)
        sys.stdout.flush()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_OUTPUT_CLOSED
    return exit_code


def _silence_stdout() -> None:
    """After the reader went away: point stdout at /dev/null so the interpreter's final flush
    raises nothing (Python's documented way to exit quietly on SIGPIPE)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
