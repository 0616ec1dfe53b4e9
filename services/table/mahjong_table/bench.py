"""Pure engine self-play benchmark: complete games per second, no I/O.

Four greedy players (`selfplay.greedy_command`, `selfplay.formula_greedy_command`) play seeded
games through `execute` (`decide` with its events folded once) as the service would, so the
figure includes the rules library's win checks (the MCR calculator and the wildcard search for
formula), the claim windows and the legal-action computation a client asks for.

    python -m mahjong_table.bench [--games 200] [--variant sichuan_bloody|formula]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from mahjong_table.domain.decide import execute, open_table
from mahjong_table.domain.evolve import fold
from mahjong_table.domain.room_rules import RoomRules
from mahjong_table.formula.decide import execute as formula_execute
from mahjong_table.formula.decide import open_formula_table
from mahjong_table.formula.evolve import fold as formula_fold
from mahjong_table.selfplay import formula_greedy_command, greedy_command

SEATS = ("p0", "p1", "p2", "p3")


def run(game_count: int, variant: str = "sichuan_bloody") -> dict[str, float]:
    """Play `game_count` seeded games; returns counts and rates."""
    command_count = 0
    event_count = 0
    end_reasons: Counter[str] = Counter()
    started_seconds = time.perf_counter()
    for seed in range(game_count):
        if variant == "formula":
            rules = RoomRules(variant="formula", exchange_three=False, min_fan=8)
            opening = open_formula_table(f"bench-{seed}", "bench", rules, SEATS, seed)
            formula_state = formula_fold(opening)
            event_count += len(opening)
            while not formula_state.is_over:
                events, formula_state = formula_execute(formula_state, formula_greedy_command(formula_state))
                command_count += 1
                event_count += len(events)
            end_reasons[formula_state.end_reason] += 1
            continue
        opening = open_table(f"bench-{seed}", "bench", RoomRules(), SEATS, seed)
        state = fold(opening)
        event_count += len(opening)
        while not state.is_over:
            events, state = execute(state, greedy_command(state))
            command_count += 1
            event_count += len(events)
        end_reasons[state.end_reason] += 1
    elapsed_seconds = time.perf_counter() - started_seconds
    return {
        "games": game_count,
        "commands": command_count,
        "events": event_count,
        "seconds": elapsed_seconds,
        "games_per_second": game_count / elapsed_seconds,
        "commands_per_second": command_count / elapsed_seconds,
        "events_per_second": event_count / elapsed_seconds,
        "three_wins_share": end_reasons["three_wins"] / game_count,
        "won_share": (end_reasons["three_wins"] + end_reasons["win"]) / game_count,
    }


def main() -> None:
    """Print the benchmark table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--games", type=int, default=200, help="games to play (default 200)")
    parser.add_argument("--variant", choices=("sichuan_bloody", "formula"), default="sichuan_bloody")
    arguments = parser.parse_args()
    result = run(arguments.games, arguments.variant)
    print(f"pure table engine self-play, {arguments.variant} (greedy players, decide + evolve, no I/O)")
    for name, value in result.items():
        print(f"  {name:<22} {value:>12,.1f}" if isinstance(value, float) else f"  {name:<22} {value:>12,}")


if __name__ == "__main__":
    main()
