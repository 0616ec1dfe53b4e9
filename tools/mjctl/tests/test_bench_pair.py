"""`mjctl.bench_pair`: the summary's arithmetic on canned runs (medians, B/A, which blocks B won,
which way each figure is better), and the real run loop against two fake checkouts whose
``.venv/bin/python`` writes canned JSON (the order, the working folder, the files kept)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from mjctl import bench_pair


def _run(games_per_second: float, act_p99_ms: float = 100.0, table_cpu: float = 0.120) -> dict[str, Any]:
    """The figures of one run as `bench_system.run_summary` writes them (those the pair compares)."""
    return {
        "games_settled_per_second": games_per_second,
        "act_p50_ms": 40.0,
        "act_p99_ms": act_p99_ms,
        "lag_p99_ms": 300.0,
        "cpu_seconds_per_game": {"table": table_cpu, "bots": 0.06, "everything": table_cpu + 0.06},
        "engine_games_per_second": 180.0,
        "full_over_engine": games_per_second / 180.0,
        "load_average": [3.0, 2.5, 2.0],
    }


def _figure(label: str, runs: list[dict[str, Any] | None]) -> bench_pair.Figure:
    return next(figure for figure in bench_pair.figures_of(runs) if figure.label == label)


def test_medians_and_the_ratio_of_each_side() -> None:
    order = "ABBA"
    runs: list[dict[str, Any] | None] = [_run(5.0), _run(6.0), _run(7.0), _run(4.0)]
    row = bench_pair.compare(order, runs, _figure("games settled / s", runs))
    assert row.a == [5.0, 4.0] and row.b == [6.0, 7.0]
    assert row.a_median == 4.5 and row.b_median == 6.5
    assert row.ratio == 6.5 / 4.5
    assert (row.blocks_won_by_b, row.blocks) == (1, 1)


def test_a_block_is_won_by_the_better_mean_and_an_incomplete_trailing_block_is_not_counted() -> None:
    order = "ABBAABBAAB"
    games = [5.0, 6.0, 6.0, 5.0, 5.0, 4.0, 5.5, 5.0, 1.0, 9.0]  # B wins block 1, loses block 2 (4.75 < 5)
    runs: list[dict[str, Any] | None] = [_run(value) for value in games]
    assert [list(block) for block in bench_pair.complete_blocks(order)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    row = bench_pair.compare(order, runs, _figure("games settled / s", runs))
    assert (row.blocks_won_by_b, row.blocks) == (1, 2)  # the trailing A B (1.0 -> 9.0) not counted
    assert row.a == [5.0, 5.0, 5.0, 5.0, 1.0] and row.b == [6.0, 6.0, 4.0, 5.5, 9.0]


def test_lower_is_better_for_latency_and_cpu_higher_for_rates_and_the_load_has_no_verdict() -> None:
    order = "ABBA"
    # B is faster and slower in the same runs: more games/s, a longer Act p99, more table CPU.
    runs: list[dict[str, Any] | None] = [_run(5.0, 100.0, 0.10), _run(6.0, 150.0, 0.12)]
    runs += [_run(6.0, 150.0, 0.12), _run(5.0, 100.0, 0.10)]
    runs[1]["engine_games_per_second"] = runs[2]["engine_games_per_second"] = 190.0  # B's box was faster
    verdicts = {
        figure.label: bench_pair.compare(order, runs, figure).blocks_won_by_b
        for figure in bench_pair.figures_of(runs)
    }
    assert verdicts["games settled / s"] == 1
    assert verdicts["full system / pure engine"] == 1
    assert verdicts["Act p99 ms"] == 0
    assert verdicts["CPU s / game: table"] == 0
    assert verdicts["CPU s / game: everything"] == 0
    assert verdicts["Act p50 ms"] == 0  # a tie is not a win
    assert verdicts["pure engine games/s"] == 1
    assert verdicts["load average (1 min)"] is None


def test_blocks_are_four_runs_with_two_of_each_side() -> None:
    assert len(bench_pair.complete_blocks("BAAB")) == 1
    assert bench_pair.complete_blocks("AAAABBBB") == []
    assert bench_pair.complete_blocks("AB") == []


def test_a_missing_run_shows_as_a_dash_and_loses_its_block() -> None:
    order = "ABBA"
    runs: list[dict[str, Any] | None] = [_run(5.0), None, _run(7.0), _run(4.0)]
    row = bench_pair.compare(order, runs, _figure("games settled / s", runs))
    assert row.b == [None, 7.0] and row.b_median == 7.0
    assert row.blocks_won_by_b == 0
    lines = bench_pair.table_lines("saturation", order, [row])
    assert lines[0] == "| saturation | A1 | A4 | B2 | B3 | A median | B median | B/A | blocks won by B |"
    assert lines[2] == "| games settled / s | 5.00 | 4.00 | – | 7.00 | 4.50 | 7.00 | 1.556 | 0 of 1 |"


FAKE_PYTHON = """#!{python}
# A checkout's stand-in for `python -m mjctl.bench_system`: its runs' figures are canned.json.
import json, os, sys
from pathlib import Path
arguments = sys.argv[1:]
with open(os.environ["BENCH_PAIR_TEST_LOG"], "a") as log:
    log.write(json.dumps({{"cwd": os.getcwd(), "arguments": arguments}}) + "\\n")
canned = json.loads(Path("canned.json").read_text())
print("fake bench_system", " ".join(arguments))
if canned["fail"]:
    sys.exit(3)
kinds = arguments[arguments.index("--runs") + 1].split(",")
path = Path(arguments[arguments.index("--json") + 1])
path.write_text(json.dumps({{kind: canned["run"] for kind in kinds}}))
"""


def _checkout(root: Path, name: str, run: dict[str, Any], fail: bool = False) -> Path:
    directory = root / name
    (directory / ".venv" / "bin").mkdir(parents=True)
    python = directory / ".venv" / "bin" / "python"
    python.write_text(FAKE_PYTHON.format(python=sys.executable))
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    (directory / "canned.json").write_text(json.dumps({"run": run, "fail": fail}))
    return directory


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("BENCH_PAIR_TEST_LOG", str(log))
    return log


def _logged(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_each_run_is_its_own_checkouts_in_the_order_and_every_file_is_kept(
    tmp_path: Path, calls: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _checkout(tmp_path, "a", _run(5.0)), _checkout(tmp_path, "b", _run(6.0))
    out = tmp_path / "out"
    code = bench_pair.main(
        [
            "--a",
            str(a),
            "--b",
            str(b),
            "--order",
            "ABBAAB",
            "--out",
            str(out),
            "--tables",
            "2",
            "--games",
            "4",
        ]
    )
    assert code == 0
    logged = _logged(calls)
    assert [Path(call["cwd"]).name for call in logged] == ["a", "b", "b", "a", "a", "b"]
    names = ["run-01-A", "run-02-B", "run-03-B", "run-04-A", "run-05-A", "run-06-B"]
    for call, name in zip(logged, names, strict=True):
        json_path = str((out / f"{name}.json").resolve())
        expected = ["-m", "mjctl.bench_system", "--tables", "2", "--games", "4", "--runs", "saturation"]
        assert call["arguments"] == [*expected, "--json", json_path]
        written = json.loads((out / f"{name}.json").read_text())["saturation"]
        assert written["games_settled_per_second"] == (5.0 if name.endswith("A") else 6.0)
        assert (out / f"{name}.txt").read_text().startswith("fake bench_system -m mjctl.bench_system")
    printed = capsys.readouterr().out
    assert (
        "| games settled / s | 5.00 | 5.00 | 5.00 | 6.00 | 6.00 | 6.00 | 5.00 | 6.00 | 1.200 | 1 of 1 |"
        in printed
    )
    assert (
        "| load average (1 min) | 3.00 | 3.00 | 3.00 | 3.00 | 3.00 | 3.00 | 3.00 | 3.00 | 1.000 | — |"
        in printed
    )
    # --summarize prints the same tables again from the folder, running nothing.
    assert bench_pair.main(["--summarize", str(out)]) == 0
    assert capsys.readouterr().out.strip() in printed
    assert len(_logged(calls)) == 6


def test_both_run_kinds_give_a_table_each(
    tmp_path: Path, calls: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _checkout(tmp_path, "a", _run(5.0)), _checkout(tmp_path, "b", _run(6.0))
    out = tmp_path / "out"
    assert (
        bench_pair.main(
            ["--a", str(a), "--b", str(b), "--order", "AB", "--runs", "saturation,think", "--out", str(out)]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "| saturation | A1 | B2 |" in printed and "| think | A1 | B2 |" in printed


def test_a_failed_run_stops_the_pair_and_the_table_shows_what_ran(
    tmp_path: Path, calls: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _checkout(tmp_path, "a", _run(5.0)), _checkout(tmp_path, "b", _run(6.0), fail=True)
    out = tmp_path / "out"
    assert bench_pair.main(["--a", str(a), "--b", str(b), "--order", "ABBA", "--out", str(out)]) == 1
    assert len(_logged(calls)) == 2
    assert not (out / "run-03-B.txt").exists()
    assert "| games settled / s | 5.00 | – | – | – | 5.00 | – | – | 0 of 1 |" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--order", "ABCA"], "only the letters A and B"),
        (["--order", "AAAA"], "only the letters A and B, and both"),
        (["--runs", "fast"], "--runs 'fast'"),
        (["--json", "x.json"], "--json is bench_pair's own"),
        (["--b", "missing"], "is not a folder"),
        (["--b", "no-venv"], ".venv/bin/python not found"),
        (["--out", "full"], "exists and is not an empty folder"),
    ],
)
def test_usage_errors_exit_2_before_any_run(
    tmp_path: Path, calls: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    a, b = _checkout(tmp_path, "a", _run(5.0)), _checkout(tmp_path, "b", _run(6.0))
    (tmp_path / "no-venv").mkdir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "earlier.txt").write_text("")
    options = {"--a": str(a), "--b": str(b), "--out": str(tmp_path / "out")}
    for option, value in zip(arguments[::2], arguments[1::2], strict=True):
        options[option] = str(tmp_path / value) if option in ("--b", "--out") else value
    with pytest.raises(SystemExit) as exit:
        bench_pair.main([part for option, value in options.items() for part in (option, value)])
    assert exit.value.code == 2
    assert message in capsys.readouterr().err
    assert not calls.exists()


def test_summarize_needs_a_pair_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        bench_pair.main(["--summarize", str(tmp_path)])
    assert exit.value.code == 2
    assert "pair.json" in capsys.readouterr().err


def test_a_and_b_are_needed_without_summarize(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        bench_pair.main(["--order", "ABBA"])
    assert exit.value.code == 2
    assert "--a DIR and --b DIR" in capsys.readouterr().err
