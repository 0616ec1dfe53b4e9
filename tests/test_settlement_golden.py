"""Golden settlement: the exact output of scoring for many seeded games of both families.

Seeded games are played through the real table aggregates (random legal players with leaves and
deadline expiries for Sichuan Bloody, RULES.md 1; greedy players with expiries and leaves for
Formula, RULES.md 2), published through the codec in envelopes and settled by scoring's pure
`game_settlement`. The test pins a SHA-256 digest of every settlement envelope (instructions with
their fans, rake, `GameSettled`) and every notice, so a refactoring of scoring that changes one
byte of one settlement line fails here. The digest of the table's own envelopes is pinned
separately: when that one changes too, the table engine changed what it emits, not scoring.

The digests were computed on main before scoring's `game_facts` was split (issue 14); they
change only with a deliberate change of the rules, and then the commit says why.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable

from mahjong_rules.room_rules import RoomRules
from mahjong_scoring.game_settlement import new_game_settlement, settle_table_events
from mahjong_table.core.commands import ExpireDeadline, Leave, TableCommand
from mahjong_table.selfplay import formula_greedy_command, random_legal_command
from mahjong_table.variants import AnyTableState, decide, evolve, fold, open_table

from .money_pipeline import table_envelopes

SEATS = ("p0", "p1", "p2", "p3")
COMMANDS_PER_GAME_LIMIT = 3_000
SICHUAN_GAMES = 120
FORMULA_GAMES = 80

TABLE_DIGEST = "0445406d3b77ff792433e75f9380dce08165a627b6786177ccacb6355332b83a"
SETTLEMENT_DIGEST = "8c78c19374985d4553481b44d13d5ecdcf7b9c93124e525676378c86ec0c193e"


def sichuan_rules(generator: random.Random) -> RoomRules:
    return RoomRules(
        coefficient=generator.choice([1, 100, 1_000]),
        rake_beans=generator.choice([0, 50, 400]),
        cap_points=generator.choice([0, 4, 8, 64]),
        self_draw_bonus=generator.choice(["double", "add_one"]),
        exchange_three=generator.random() < 0.5,
    )


def formula_rules(generator: random.Random) -> RoomRules:
    return RoomRules(
        variant="formula",
        exchange_three=False,
        coefficient=generator.choice([1, 100]),
        rake_beans=generator.choice([0, 50]),
        fan_term=generator.choice(["fan", "fan_plus_8"]),
        min_fan=generator.choice([1, 8]),
    )


def sichuan_command(state: AnyTableState, generator: random.Random) -> TableCommand:
    return random_legal_command(state, generator, leave_chance=0.004, greedy_chance=0.5)  # type: ignore[arg-type]


def formula_command(state: AnyTableState, generator: random.Random) -> TableCommand:
    roll = generator.random()
    if roll < 0.03:
        return ExpireDeadline()
    if roll < 0.035:
        return Leave(generator.choice([seat for seat in range(4) if not state.players[seat].left]), "leave")
    return formula_greedy_command(state)  # type: ignore[arg-type]


def play(
    seed: int, rules: RoomRules, command: Callable[[AnyTableState, random.Random], TableCommand]
) -> list[object]:
    events = open_table(f"golden-{rules.variant}-{seed}", "room-golden", rules, SEATS, seed)
    state = fold(events)
    generator = random.Random(seed)
    for _ in range(COMMANDS_PER_GAME_LIMIT):
        if state.is_over:
            return list(events)
        new_events = decide(state, command(state, generator))
        for event in new_events:
            state = evolve(state, event)
        events.extend(new_events)
    raise AssertionError(f"game {seed} did not end")


def digests() -> tuple[str, str]:
    table_hash, settlement_hash = hashlib.sha256(), hashlib.sha256()
    games = [(seed, sichuan_rules, sichuan_command) for seed in range(SICHUAN_GAMES)]
    games += [(seed, formula_rules, formula_command) for seed in range(FORMULA_GAMES)]
    for seed, make_rules, command in games:
        envelopes = table_envelopes(play(seed, make_rules(random.Random(seed)), command))  # type: ignore[arg-type]
        for envelope in envelopes:
            table_hash.update(envelope.SerializeToString(deterministic=True))
        _, output = settle_table_events(new_game_settlement(), envelopes)
        for out in output.envelopes:
            settlement_hash.update(out.SerializeToString(deterministic=True))
        for notice in output.notices:
            settlement_hash.update(f"{notice.source}:{notice.message}".encode())
    return table_hash.hexdigest(), settlement_hash.hexdigest()


def test_seeded_games_of_both_families_settle_exactly_as_pinned() -> None:
    table_digest, settlement_digest = digests()
    assert table_digest == TABLE_DIGEST, "the table engine emits other events for the same seeds"
    assert settlement_digest == SETTLEMENT_DIGEST
