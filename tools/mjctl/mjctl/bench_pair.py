"""``make bench-pair`` (``python -m mjctl.bench_pair``): two checkouts' `mjctl.bench_system`,
alternated run by run, and one table comparing them.

This box's speed moves 15-30% between runs of the same code, so a change is measured as a pair:
the checkout before it (A) and after it (B) run one at a time in an order like A B B A A B B A,
so that a slow stretch of the box falls on both sides. Each run is
``DIR/.venv/bin/python -m mjctl.bench_system ... --json FILE`` with DIR as its working folder, so
each side runs its own code (its venv's editable installs). Every run's printed output and JSON
stay in ``--out`` (``pair.json`` says which run was which); the table shows each figure of every
run, each side's median, B's median over A's, and, for each complete block of four runs (two of
each side, as A B B A), whether B's mean beat A's. It judges nothing more: with 2 blocks, "2 of 2"
is what the reader weighs against the box's noise. ``--summarize DIR`` prints the table again from
an earlier ``--out``. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RUN_KINDS = ("saturation", "think")
BLOCK_RUNS = 4
"""A block is four consecutive runs of the order, two of each side (A B B A, or B A A B)."""
MANIFEST = "pair.json"
HIGHER, LOWER, NO_VERDICT = "higher", "lower", "none"


@dataclasses.dataclass(frozen=True)
class Figure:
    """One row of the table: where the figure is in a run's JSON (`bench_system.run_summary`),
    which way is better, and how it is printed."""

    label: str
    path: tuple[str, ...]
    better: str
    digits: int

    def value(self, run: dict[str, Any] | None) -> float | None:
        found: Any = run
        for key in self.path:
            if not isinstance(found, dict) or key not in found:
                return None
            found = found[key]
        if isinstance(found, list):  # the load average: its 1-minute figure
            found = found[0] if found else None
        return float(found) if isinstance(found, int | float) else None


@dataclasses.dataclass(frozen=True)
class Row:
    """One figure compared: the runs of each side in order, their medians, B's over A's, and the
    blocks B won of the complete ones (None when the figure has no better way)."""

    figure: Figure
    a: list[float | None]
    b: list[float | None]
    a_median: float | None
    b_median: float | None
    ratio: float | None
    blocks_won_by_b: int | None
    blocks: int


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mjctl.bench_pair",
        description=__doc__,
        allow_abbrev=False,  # the options it does not know go to bench_system as they are
        epilog="Any other option (e.g. --tables 32 --games 128) is passed to every bench_system run.",
    )
    parser.add_argument("--a", type=Path, metavar="DIR", help="the checkout before (its .venv: make setup)")
    parser.add_argument("--b", type=Path, metavar="DIR", help="the checkout after (its .venv: make setup)")
    parser.add_argument("--order", default="ABBAABBA", help="the runs' order: A and B (ABBAABBA)")
    parser.add_argument("--runs", default="saturation", help="saturation, think, or both")
    parser.add_argument("--out", type=Path, metavar="DIR", help="where the runs' output goes (new or empty)")
    parser.add_argument("--summarize", type=Path, metavar="DIR", help="an earlier --out's table")
    arguments, passed_on = parser.parse_known_args(argv)
    if arguments.summarize is not None:
        if not (arguments.summarize / MANIFEST).is_file():
            parser.error(f"--summarize: no {MANIFEST} in {arguments.summarize} (not a bench_pair --out)")
        print(summary_text(arguments.summarize))
        return 0
    _validate(parser, arguments, passed_on)
    out = arguments.out or Path(tempfile.mkdtemp(prefix="mahjong-bench-pair-"))
    sides = {"A": arguments.a.resolve(), "B": arguments.b.resolve()}
    failed = run_pair(sides, arguments.order, arguments.runs, passed_on, out)
    print(summary_text(out))
    return 1 if failed else 0


def _validate(parser: argparse.ArgumentParser, arguments: argparse.Namespace, passed_on: list[str]) -> None:
    """Every usage error before the first run (`parser.error`: the message and exit code 2)."""
    if arguments.a is None or arguments.b is None:
        parser.error("--a DIR and --b DIR are both needed (or --summarize DIR)")
    for side in ("a", "b"):
        directory: Path = getattr(arguments, side)
        if not directory.is_dir():
            parser.error(f"--{side}: {directory} is not a folder")
        if not (directory / ".venv" / "bin" / "python").is_file():
            parser.error(f"--{side}: {directory}/.venv/bin/python not found (run make setup there)")
    order = arguments.order
    if not order or set(order) - {"A", "B"} or not {"A", "B"} <= set(order):
        parser.error(f"--order {order!r}: only the letters A and B, and both of them (e.g. ABBAABBA)")
    kinds = arguments.runs.split(",")
    if set(kinds) - set(RUN_KINDS) or len(set(kinds)) != len(kinds):
        parser.error(f"--runs {arguments.runs!r}: saturation, think, or saturation,think")
    out = arguments.out
    if out is not None and out.exists() and (not out.is_dir() or any(out.iterdir())):
        parser.error(f"--out: {out} exists and is not an empty folder")
    if any(argument == "--json" or argument.startswith("--json=") for argument in passed_on):
        parser.error("--json is bench_pair's own (it gives each run its file in --out)")


def run_pair(sides: dict[str, Path], order: str, runs: str, passed_on: Sequence[str], out: Path) -> bool:
    """Each run of `order` in turn, one at a time, its output and JSON kept in `out`; True when
    a run failed (the runs after it are not started: a side that fails once is to be looked at)."""
    out.mkdir(parents=True, exist_ok=True)
    manifest = {
        "sides": {
            side: {"directory": str(directory), "commit": _commit(directory)}
            for side, directory in sides.items()
        },
        "order": order,
        "runs": runs.split(","),
        "bench_system_arguments": list(passed_on),
        "started": _now(),
        "run_files": [f"run-{index:02d}-{side}" for index, side in enumerate(order, start=1)],
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    print(f"bench-pair: {len(order)} runs, order {order}, {runs}; output in {out}", flush=True)
    for index, (side, name) in enumerate(zip(order, manifest["run_files"], strict=True), start=1):
        directory = sides[side]
        command = [
            str(directory / ".venv" / "bin" / "python"),
            "-m",
            "mjctl.bench_system",
            *passed_on,
            "--runs",
            runs,
            "--json",
            str((out / f"{name}.json").resolve()),
        ]
        started = time.monotonic()
        with (out / f"{name}.txt").open("wb") as log:
            result = subprocess.run(command, cwd=directory, stdout=log, stderr=subprocess.STDOUT, check=False)
        seconds = time.monotonic() - started
        code = result.returncode
        print(
            f"run {index} of {len(order)}: {side} ({directory}) {seconds:.0f} s, exit code {code}", flush=True
        )
        if result.returncode != 0:
            print(f"run {index} failed; its output: {out / f'{name}.txt'}", file=sys.stderr)
            return True
    return False


def summary_text(out: Path) -> str:
    """The Markdown tables of an --out folder: one per run kind, from the runs' JSON files (a run
    without one, failed or not run yet, shows as a dash)."""
    manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    order: str = manifest["order"]
    runs = [_read_runs(out / f"{name}.json") for name in manifest["run_files"]]
    lines = [
        f"A = {_side_line(manifest['sides']['A'])}; B = {_side_line(manifest['sides']['B'])}",
        f"order {order}; bench_system {' '.join(manifest['bench_system_arguments'])}; "
        f"started {manifest['started']}",
    ]
    for kind in manifest["runs"]:
        kind_runs = [run.get(kind) if run is not None else None for run in runs]
        rows = [compare(order, kind_runs, figure) for figure in figures_of(kind_runs)]
        lines += ["", *table_lines(kind, order, rows)]
    blocks = len(complete_blocks(order))
    lines.append(
        f"\n{blocks} complete block(s) of four runs with two of each side; a block is won by B when B's mean "
        "is better (higher games/s and pure engine, lower latency and CPU); the load average has no verdict."
    )
    return "\n".join(lines)


def figures_of(runs: Sequence[dict[str, Any] | None]) -> list[Figure]:
    """The compared figures, the processes' CPU rows as the runs name them (the services, the
    broker, the bots, everything)."""
    processes: list[str] = []
    for run in runs:
        for name in (run or {}).get("cpu_seconds_per_game", {}):
            if name not in processes:
                processes.append(name)
    return [
        Figure("games settled / s", ("games_settled_per_second",), HIGHER, 2),
        Figure("Act p50 ms", ("act_p50_ms",), LOWER, 1),
        Figure("Act p99 ms", ("act_p99_ms",), LOWER, 1),
        Figure("settlement lag p99 ms", ("lag_p99_ms",), LOWER, 0),
        *(Figure(f"CPU s / game: {name}", ("cpu_seconds_per_game", name), LOWER, 3) for name in processes),
        Figure("pure engine games/s", ("engine_games_per_second",), HIGHER, 1),
        Figure("full system / pure engine", ("full_over_engine",), HIGHER, 4),
        Figure("load average (1 min)", ("load_average",), NO_VERDICT, 2),
    ]


def complete_blocks(order: str) -> list[range]:
    """The positions of each complete block: four consecutive runs, two of each side; a trailing
    block of fewer than four runs (A B B A A B) is not one."""
    blocks = [range(start, start + BLOCK_RUNS) for start in range(0, len(order) - BLOCK_RUNS + 1, BLOCK_RUNS)]
    return [block for block in blocks if sorted(order[index] for index in block) == ["A", "A", "B", "B"]]


def compare(order: str, runs: Sequence[dict[str, Any] | None], figure: Figure) -> Row:
    """One figure of the runs (`runs[i]` is the run at position i of `order`) compared by side."""
    values = [figure.value(run) for run in runs]
    a = [value for value, side in zip(values, order, strict=True) if side == "A"]
    b = [value for value, side in zip(values, order, strict=True) if side == "B"]
    a_median, b_median = _median(a), _median(b)
    ratio = b_median / a_median if a_median and b_median is not None else None
    blocks = complete_blocks(order)
    won = None
    if figure.better != NO_VERDICT:
        won = sum(_b_wins(order, values, block, figure.better) for block in blocks)
    return Row(figure, a, b, a_median, b_median, ratio, won, len(blocks))


def _b_wins(order: str, values: Sequence[float | None], block: range, better: str) -> bool:
    """Whether B's mean beat A's in the block (a block missing a value is not won)."""
    a = [values[index] for index in block if order[index] == "A"]
    b = [values[index] for index in block if order[index] == "B"]
    if None in a or None in b:
        return False
    a_mean = statistics.fmean(value for value in a if value is not None)
    b_mean = statistics.fmean(value for value in b if value is not None)
    return b_mean > a_mean if better == HIGHER else b_mean < a_mean


def table_lines(kind: str, order: str, rows: Sequence[Row]) -> list[str]:
    """The rows as a Markdown table; each run's column named by its side and position (A1, B2, B3, A4)."""
    a_names = [f"A{index}" for index, side in enumerate(order, start=1) if side == "A"]
    b_names = [f"B{index}" for index, side in enumerate(order, start=1) if side == "B"]
    columns = [kind, *a_names, *b_names, "A median", "B median", "B/A", "blocks won by B"]
    lines = ["| " + " | ".join(columns) + " |", "|---|" + "---:|" * (len(columns) - 1)]
    for row in rows:
        digits = row.figure.digits
        cells = [row.figure.label, *(_number(value, digits) for value in [*row.a, *row.b])]
        cells += [_number(row.a_median, digits), _number(row.b_median, digits), _number(row.ratio, 3)]
        verdict = row.blocks_won_by_b is not None and row.blocks > 0
        cells.append(f"{row.blocks_won_by_b} of {row.blocks}" if verdict else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _median(values: Sequence[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def _number(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _read_runs(path: Path) -> dict[str, Any] | None:
    """A run's JSON (`bench_system --json`), or None when the run wrote none."""
    if not path.is_file():
        return None
    runs: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return runs


def _side_line(side: dict[str, str]) -> str:
    return f"{side['directory']} ({side['commit'] or 'commit unknown'})"


def _commit(directory: Path) -> str:
    """The checkout's commit, "+ changes" when its work tree differs from it ("" outside git)."""
    git = ["git", "-C", str(directory)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    if head.returncode != 0:
        return ""
    status = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True, check=False)
    return head.stdout.strip() + (" + changes" if status.stdout.strip() else "")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


if __name__ == "__main__":
    raise SystemExit(main())
