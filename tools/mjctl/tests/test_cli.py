"""`mjctl` conventions: help for every option of every subcommand, subcommand modules imported
lazily (``mjctl --help`` imports none), exit codes, and a closed output ends the command quietly."""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys

import pytest
from mjctl.__main__ import EXIT_OUTPUT_CLOSED, EXIT_USAGE, SUBCOMMANDS, build_parser, main

from .test_replay import TABLE_ID, played_game, stores


def subcommand_parsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser(None)
    subparsers = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return dict(subparsers.choices)


def test_every_subcommand_listed_is_the_one_its_module_registers() -> None:
    assert sorted(subcommand_parsers()) == sorted(subcommand.name for subcommand in SUBCOMMANDS)


@pytest.mark.parametrize("name", [subcommand.name for subcommand in SUBCOMMANDS])
def test_every_option_of_every_subcommand_has_help(name: str) -> None:
    parser = subcommand_parsers()[name]
    for action in parser._actions:
        assert action.help and action.help != argparse.SUPPRESS, f"mjctl {name} {action.option_strings}"


def imported_modules_after(arguments: list[str]) -> set[str]:
    """The modules a fresh interpreter has imported after running ``mjctl ARGUMENTS``."""
    program = (
        "import sys\n"
        "from mjctl.__main__ import main\n"
        f"try:\n    main({arguments!r})\nexcept SystemExit:\n    pass\n"
        "print('\\n'.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    finished = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    return set(finished.stderr.split())


def test_mjctl_help_imports_no_subcommand_module_nor_any_heavy_library() -> None:
    modules = imported_modules_after(["--help"])
    assert not {subcommand.module for subcommand in SUBCOMMANDS} & modules
    assert not {"grpc", "kafka", "sqlalchemy", "google.protobuf", "mahjong_rules"} & modules


def test_a_subcommand_s_help_imports_only_its_own_module() -> None:
    modules = imported_modules_after(["replay", "--help"])
    assert "mjctl.replay" in modules
    assert not {subcommand.module for subcommand in SUBCOMMANDS if subcommand.name != "replay"} & modules
    assert "kafka" not in modules


def test_the_top_level_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    help_text = capsys.readouterr().out
    assert all(f"  {code} " in help_text for code in ("0", "1", "2", "130", "141"))


def test_an_unknown_subcommand_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exited:
        main(["nope"])
    assert exited.value.code == EXIT_USAGE


def test_replay_into_a_closed_pipe_exits_141_without_a_traceback(tmp_path: pathlib.Path) -> None:
    table_url, scoring_url = stores(tmp_path, [played_game()])
    command = [sys.executable, "-m", "mjctl", "replay", "--table", TABLE_ID, "--database", table_url]
    command += ["--scoring-database", scoring_url]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader goes away before anything is written, like `| head -0`
    errors = process.stderr.read().decode()
    assert process.wait(timeout=60) == EXIT_OUTPUT_CLOSED
    assert "Traceback" not in errors and "BrokenPipe" not in errors
