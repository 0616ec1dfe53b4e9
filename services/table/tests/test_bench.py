"""The pure engine benchmark (`python -m mahjong_table.bench`): seeded games, one table, a rate a
script can read. Nothing here asserts on speed."""

from __future__ import annotations

import re
import sys

import pytest
from mahjong_table import bench


def test_the_same_seeds_play_the_same_games() -> None:
    first = bench.run(2, first_seed=5)
    again = bench.run(2, first_seed=5)
    assert (first["commands"], first["events"]) == (again["commands"], again["events"])
    assert first["games"] == 2 and first["commands"] > 0 and first["events"] > first["commands"]


@pytest.mark.parametrize("variant", bench.VARIANTS)
def test_the_bench_prints_one_table_and_a_rate_scripts_can_read(
    variant: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["bench", "--games", "1", "--seed", "3", "--variant", variant])
    bench.main()
    output = capsys.readouterr().out
    assert f"| pure engine, {variant}" in output
    assert "| games " in output and "1 (seeds 3..3)" in output
    assert re.search(r"^games_per_second\s+[\d.]+$", output, re.MULTILINE)
