"""Benchmark: formula evaluations per second with 0, 1 and 2 wildcards (issue 6, "Speed").

``python -m mahjong_rules.formula.bench [--hands 300] [--rounds 5]`` prints a Markdown table.
Each row evaluates the same seeded random winning hands; "bare" is one ``MahjongFanCalculator``
call per hand on the same hands, in the same run, for scale. Rounds are interleaved (every kind
once per round) and the best round is kept, so machine noise hits every row alike. With k
wildcards, k tiles of each hand are replaced by the wildcard's face (a tile the hand does not
hold; with 0 the room still has that wildcard, the hand just holds none, as in play). The
per-suit completion cache of ``wildcards`` is warm after the first round, as in play.
Targets: 0 wildcards within 2x of the bare call; each added wildcard at most 10x slower.
"""

import argparse
import random
import time
from collections.abc import Callable

from MahjongGB import MahjongFanCalculator  # type: ignore[import-not-found]  # a C extension with no stubs

from mahjong_rules.formula.fans import CALCULATOR_CODES
from mahjong_rules.formula.wildcards import evaluate_formula_win
from mahjong_rules.tiles import Tile

WILDCARD_COUNTS = (0, 1, 2, 3, 4)


def winning_hands(count: int, seed: int) -> list[tuple[list[Tile], Tile]]:
    """``count`` random winning hands (four sets + a pair, no fifth copy) as (concealed, winning tile)."""
    rng = random.Random(seed)
    hands: list[tuple[list[Tile], Tile]] = []
    while len(hands) < count:
        tiles: list[Tile] = []
        for _ in range(4):
            if rng.random() < 0.6:
                start = rng.randrange(3) * 9 + rng.randrange(7)
                tiles += [start, start + 1, start + 2]
            else:
                tiles += [rng.randrange(34)] * 3
        tiles += [rng.randrange(34)] * 2
        if all(tiles.count(tile) <= 4 for tile in tiles):
            rng.shuffle(tiles)
            hands.append((tiles[:13], tiles[13]))
    return hands


def with_wildcards(hands: list[tuple[list[Tile], Tile]], count: int) -> list[tuple[list[Tile], Tile, Tile]]:
    """The hands with their first ``count`` concealed tiles turned into a wildcard they do not hold."""
    result: list[tuple[list[Tile], Tile, Tile]] = []
    for concealed, win_tile in hands:
        held = {*concealed, win_tile}
        wildcard = next(tile for tile in range(33, -1, -1) if tile not in held)
        result.append(([wildcard] * count + concealed[count:], win_tile, wildcard))
    return result


def _bare(hands: list[tuple[list[Tile], Tile]]) -> Callable[[], None]:
    def run() -> None:
        for concealed, win_tile in hands:
            codes = tuple(CALCULATOR_CODES[tile] for tile in concealed)
            MahjongFanCalculator((), codes, CALCULATOR_CODES[win_tile], 0, False, False, False, False, 0, 0)

    return run


def _ours(hands: list[tuple[list[Tile], Tile, Tile]]) -> Callable[[], None]:
    def run() -> None:
        for concealed, win_tile, wildcard in hands:
            evaluation = evaluate_formula_win(concealed, [], win_tile, wildcard=wildcard)
            assert evaluation is not None, "every benchmark hand is a win"

    return run


def measure(hand_count: int, rounds: int, seed: int) -> dict[str, float]:
    """Best evaluations per second over ``rounds`` interleaved rounds, per row."""
    hands = winning_hands(hand_count, seed)
    runners: dict[str, Callable[[], None]] = {"bare MahjongFanCalculator": _bare(hands)}
    for count in WILDCARD_COUNTS:
        runners[f"{count} wildcard{'s' if count != 1 else ''}"] = _ours(with_wildcards(hands, count))
    best: dict[str, float] = dict.fromkeys(runners, 0.0)
    for _ in range(rounds):
        for name, run in runners.items():
            start = time.perf_counter()
            run()
            elapsed = time.perf_counter() - start
            best[name] = max(best[name], hand_count / elapsed)
    return best


def table(rates: dict[str, float]) -> str:
    """The Markdown table: rate, time per evaluation, ratio to the bare call and to the row above."""
    bare = rates["bare MahjongFanCalculator"]
    lines = [
        "| evaluation | per second | µs each | × bare | × previous row |",
        "|---|---:|---:|---:|---:|",
    ]
    previous: float | None = None
    for name, rate in rates.items():
        step = "" if previous is None or name.startswith("bare") else f"{previous / rate:.1f}"
        lines.append(f"| {name} | {rate:,.0f} | {1e6 / rate:.1f} | {bare / rate:.1f} | {step} |")
        previous = None if name.startswith("bare") else rate
    return "\n".join(lines)


def main() -> None:
    """Entry point: print the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hands", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=2026)
    arguments = parser.parse_args()
    print(table(measure(arguments.hands, arguments.rounds, arguments.seed)))


if __name__ == "__main__":
    main()
