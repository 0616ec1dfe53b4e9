"""What the test session prints about a failed test's broker traffic (a CI machine keeps no logs)."""

from __future__ import annotations

from pathlib import Path

from mahjong_infra.pytest_plugin import broker_lines_mentioning


def _log(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "server.log"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_only_the_lines_naming_the_prefix_are_printed_in_order(tmp_path: Path) -> None:
    log = _log(
        tmp_path,
        [
            "INFO Created log for partition t.test_a.0123abcd.mahjong.table.v1-0",
            "INFO Preparing to rebalance group t.test_b.89abcdef.owners",
            "INFO Leader m-1 re-joining group t.test_a.0123abcd.owners during Stable",
        ],
    )
    assert broker_lines_mentioning(log, "t.test_a.0123abcd.") == [
        "INFO Created log for partition t.test_a.0123abcd.mahjong.table.v1-0",
        "INFO Leader m-1 re-joining group t.test_a.0123abcd.owners during Stable",
    ]
    assert broker_lines_mentioning(log, "t.test_c.00000000.") == []


def test_a_long_story_keeps_its_last_lines_and_says_how_many_were_left_out(tmp_path: Path) -> None:
    log = _log(tmp_path, [f"line {index} t.test_a.0123abcd.owners" for index in range(10)])
    assert broker_lines_mentioning(log, "t.test_a.0123abcd.", limit=3) == [
        "(7 earlier lines left out)",
        "line 7 t.test_a.0123abcd.owners",
        "line 8 t.test_a.0123abcd.owners",
        "line 9 t.test_a.0123abcd.owners",
    ]


def test_a_line_that_is_not_utf8_is_still_printed(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"group t.test_a.0123abcd.owners \xff\n")
    assert broker_lines_mentioning(log, "t.test_a.0123abcd.") == ["group t.test_a.0123abcd.owners \ufffd"]
