"""Pure engine self-play benchmark: complete games per second, no I/O.

Four greedy players (`selfplay.greedy_command`, `selfplay.formula_greedy_command`) play seeded
games through `execute` (`decide` with its events folded once) as the service would, so the
figure includes the rules library's win checks (the MCR calculator and the wildcard search for
formula), the claim windows and the legal-action computation a client asks for.

    python -m mahjong_table.bench [--games 200] [--seed 0] [--variant sichuan_bloody|formula]

Prints one table, then `games_per_second N` on its own line for scripts (`make bench-system`).
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter

from mahjong_rules.room_rules import RoomRules

from mahjong_table.formula.decide import execute as formula_execute
from mahjong_table.formula.decide import open_formula_table
from mahjong_table.formula.evolve import fold as formula_fold
from mahjong_table.selfplay import formula_greedy_command, greedy_command
from mahjong_table.sichuan.decide import execute, open_table
from mahjong_table.sichuan.evolve import fold

SEATS = ("p0", "p1", "p2", "p3")
VARIANTS = ("sichuan_bloody", "formula")


def _play_sichuan(seed: int) -> tuple[int, int, str]:
    """One greedy game: (commands, events, end reason)."""
    opening = open_table(f"bench-{seed}", "bench", RoomRules(), SEATS, seed)
    state = fold(opening)
    commands, events = 0, len(opening)
    while not state.is_over:
        new_events, state = execute(state, greedy_command(state))
        commands += 1
        events += len(new_events)
    return commands, events, state.end_reason


def _play_formula(seed: int) -> tuple[int, int, str]:
    """One greedy game at a formula table (min 8 fan): (commands, events, end reason)."""
    rules = RoomRules(variant="formula", exchange_three=False, min_fan=8)
    opening = open_formula_table(f"bench-{seed}", "bench", rules, SEATS, seed)
    state = formula_fold(opening)
    commands, events = 0, len(opening)
    while not state.is_over:
        new_events, state = formula_execute(state, formula_greedy_command(state))
        commands += 1
        events += len(new_events)
    return commands, events, state.end_reason


def run(game_count: int, variant: str = "sichuan_bloody", first_seed: int = 0) -> dict[str, float]:
    """Play `game_count` seeded games (seeds `first_seed`, `first_seed + 1`, ...); returns counts
    and rates."""
    play = _play_formula if variant == "formula" else _play_sichuan
    command_count = 0
    event_count = 0
    end_reasons: Counter[str] = Counter()
    started_seconds, started_cpu_seconds = time.perf_counter(), time.process_time()
    for seed in range(first_seed, first_seed + game_count):
        commands, events, end_reason = play(seed)
        command_count += commands
        event_count += events
        end_reasons[end_reason] += 1
    elapsed_seconds = time.perf_counter() - started_seconds
    cpu_seconds = time.process_time() - started_cpu_seconds
    return {
        "games": game_count,
        "commands": command_count,
        "events": event_count,
        "seconds": elapsed_seconds,
        "cpu_seconds": cpu_seconds,
        "games_per_second": game_count / elapsed_seconds,
        "games_per_cpu_second": game_count / cpu_seconds,
        "commands_per_second": command_count / elapsed_seconds,
        "events_per_second": event_count / elapsed_seconds,
        "three_wins_share": end_reasons["three_wins"] / game_count,
        "won_share": (end_reasons["three_wins"] + end_reasons["win"]) / game_count,
        **{f"ended_{reason}_share": count / game_count for reason, count in sorted(end_reasons.items())},
    }


def summary(result: dict[str, float], variant: str, first_seed: int) -> str:
    """The result as one Markdown table (pasteable into README), with the machine's load."""
    games = int(result["games"])
    rows = [
        ("games", f"{games:,} (seeds {first_seed}..{first_seed + games - 1})"),
        ("games / s", f"{result['games_per_second']:,.1f}"),
        ("games / CPU s (this process)", f"{result['games_per_cpu_second']:,.1f}"),
        ("commands / s", f"{result['commands_per_second']:,.0f}"),
        ("events / s", f"{result['events_per_second']:,.0f}"),
        ("µs per command", f"{1e6 / result['commands_per_second']:,.1f}"),
        ("seconds (CPU seconds)", f"{result['seconds']:,.2f} ({result['cpu_seconds']:,.2f})"),
        *(
            (f"ended by {name.removeprefix('ended_').removesuffix('_share')}", f"{share:.0%}")
            for name, share in result.items()
            if name.startswith("ended_")
        ),
        ("load average (1/5/15 min)", " ".join(f"{value:.2f}" for value in os.getloadavg())),
    ]
    title = f"pure engine, {variant}"
    width = max(len(title), *(len(name) for name, _ in rows))
    value_width = max(len(value) for _, value in rows)
    lines = [
        f"| {title:<{width}} | {'':>{value_width}} |",
        f"|{'-' * (width + 2)}|{'-' * (value_width + 1)}:|",
        *(f"| {name:<{width}} | {value:>{value_width}} |" for name, value in rows),
    ]
    return "\n".join(lines)


def main() -> None:
    """Play, print the table and the machine-readable rate."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--games", type=int, default=200, help="games to play (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first game (default 0)")
    parser.add_argument("--variant", choices=VARIANTS, default="sichuan_bloody")
    arguments = parser.parse_args()
    if arguments.games < 1:
        parser.error("--games must be at least 1")
    result = run(arguments.games, arguments.variant, arguments.seed)
    print("pure table engine self-play: greedy players, decide + evolve, no I/O")
    print(summary(result, arguments.variant, arguments.seed))
    print(f"games_per_second {result['games_per_second']:.1f}")


if __name__ == "__main__":
    main()
