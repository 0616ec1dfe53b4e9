"""Benchmark: ``python -m mahjong_rules.bench`` prints calls per second for our hot paths and the peer's.

Over a fixed, seeded set of hands (half random winning hands with 0-2 melds, half random two-suit
hands), it measures in one run: our full evaluation (``evaluate_win``: win check + every multiplier)
against the PyPI ``mahjong`` package's bare ``Agari().is_agari``, and our waits with multipliers
(``find_waits``) against its ``Shanten().calculate_shanten``, on equivalent hands in its 34-count
format (melds counted as three tiles). The peer is imported here only; the product never uses it.
"""

import argparse
import importlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from mahjong_rules.fans import WinContext, evaluate_win
from mahjong_rules.hand import Meld
from mahjong_rules.tiles import SUITS
from mahjong_rules.waits import find_waits

BENCH_SEED = 20240601
HAND_COUNT = 2000
REPEATS = 3


@dataclass(frozen=True)
class BenchHand:
    """One benchmark position: concealed tiles (winning tile last), melds and the missing suit index."""

    concealed: list[int]
    melds: list[Meld]
    missing_index: int


def _winning_hand(generator: random.Random) -> BenchHand:
    """A random winning hand of two suits: four sets (pongs or runs, some melded) and a pair."""
    while True:
        suits = generator.sample(range(3), 2)
        counts = [0] * 27
        concealed: list[int] = []
        melds: list[Meld] = []
        meld_budget = generator.choice((0, 0, 1, 2))
        for _ in range(4):
            base = generator.choice(suits) * 9
            if generator.random() < 0.35:
                tile = base + generator.randrange(9)
                if len(melds) < meld_budget:
                    meld = Meld("kong", tile, "exposed") if generator.random() < 0.5 else Meld("pong", tile)
                    melds.append(meld)
                    counts[tile] += meld.size
                    continue
                concealed += [tile] * 3
            else:
                start = base + generator.randrange(7)
                concealed += [start, start + 1, start + 2]
        pair = generator.choice(suits) * 9 + generator.randrange(9)
        concealed += [pair, pair]
        for tile in concealed:
            counts[tile] += 1
        if max(counts) <= 4:
            generator.shuffle(concealed)
            missing = next(suit for suit in range(3) if suit not in suits)
            return BenchHand(concealed, melds, missing)


def _random_hand(generator: random.Random) -> BenchHand:
    """Fourteen random tiles of two suits (almost never a win)."""
    suits = generator.sample(range(3), 2)
    pool = [suit * 9 + rank for suit in suits for rank in range(9) for _ in range(4)]
    missing = next(suit for suit in range(3) if suit not in suits)
    return BenchHand(generator.sample(pool, 14), [], missing)


def bench_hands(seed: int = BENCH_SEED, count: int = HAND_COUNT) -> list[BenchHand]:
    """The fixed benchmark set: ``count`` hands, alternating winning and random."""
    generator = random.Random(seed)
    return [_winning_hand(generator) if index % 2 == 0 else _random_hand(generator) for index in range(count)]


def _to_34(tiles: list[int], melds: list[Meld]) -> list[int]:
    counts = [0] * 34
    for tile in tiles:
        counts[tile] += 1
    for meld in melds:
        counts[meld.tile] += 3
    return counts


def _calls_per_second(function: Callable[[], object], calls: int) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return calls / best


def main() -> None:
    """Run the benchmark and print a markdown table."""
    parser = argparse.ArgumentParser(prog="python -m mahjong_rules.bench", description=__doc__)
    parser.add_argument("--hands", type=int, default=HAND_COUNT, help="number of hands (default %(default)s)")
    arguments = parser.parse_args()
    hands = bench_hands(count=arguments.hands)
    suits = SUITS
    context = WinContext(win_by="self_draw")
    win_inputs = [
        (hand.concealed[:-1], hand.melds, hand.concealed[-1], suits[hand.missing_index]) for hand in hands
    ]
    wait_inputs = [(hand.concealed[:-1], hand.melds, suits[hand.missing_index]) for hand in hands]
    peer_win_inputs = [_to_34(hand.concealed, hand.melds) for hand in hands]
    peer_wait_inputs = [_to_34(hand.concealed[:-1], hand.melds) for hand in hands]

    def our_evaluation() -> None:
        for concealed, melds, win_tile, missing in win_inputs:
            evaluate_win(concealed, melds, win_tile, missing, context)

    def our_waits() -> None:
        for concealed, melds, missing in wait_inputs:
            find_waits(concealed, melds, missing)

    rows = [
        (
            "mahjong_rules evaluate_win (win check + all multipliers)",
            _calls_per_second(our_evaluation, len(hands)),
        ),
        ("mahjong_rules find_waits (waits + wait multipliers)", _calls_per_second(our_waits, len(hands))),
    ]
    try:
        # Imported by name: the peer shares its top-level name with our generated `mahjong.v1`
        # and is only on the path when `make bench` puts it there.
        Agari = importlib.import_module("mahjong.agari").Agari
        Shanten = importlib.import_module("mahjong.shanten").Shanten
    except ImportError:
        print("(peer package `mahjong` not installed: pip install mahjong==1.3.0)")
    else:
        agari, shanten = Agari(), Shanten()

        def peer_agari() -> None:
            for counts in peer_win_inputs:
                agari.is_agari(counts)

        def peer_shanten() -> None:
            for counts in peer_wait_inputs:
                shanten.calculate_shanten(counts)

        rows.append(
            ("mahjong 1.3.0 Agari().is_agari (bare win check)", _calls_per_second(peer_agari, len(hands)))
        )
        rows.append(
            ("mahjong 1.3.0 Shanten().calculate_shanten", _calls_per_second(peer_shanten, len(hands)))
        )
    wins = sum(
        1 for concealed, melds, tile, missing in win_inputs if evaluate_win(concealed, melds, tile, missing)
    )
    print(f"{len(hands)} hands (seed {BENCH_SEED}, {wins} winning), best of {REPEATS} runs")
    print()
    print("| measurement | calls/s | µs/call |")
    print("|---|---:|---:|")
    for name, rate in rows:
        print(f"| {name} | {rate:,.0f} | {1e6 / rate:.1f} |")


if __name__ == "__main__":
    main()
