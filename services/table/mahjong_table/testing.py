"""Test helpers: build a wall that deals chosen hands, and a small harness that folds events,
for both families (Sichuan Bloody: `wall_for`, `table_with_hands`; formula: `formula_wall_for`,
`formula_table_with_hands`).

Used by this package's tests and the cross-service tests (deterministic tables without seeds).
Not used by production code.
"""

from __future__ import annotations

import datetime
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from mahjong.v1 import common_pb2, envelope_pb2, match_events_pb2, rooms_pb2
from mahjong_platform.envelopes import new_envelope
from mahjong_rules.formula.wall import FORMULA_TILES
from mahjong_rules.room_rules import RoomRules
from mahjong_rules.tiles import parse_tiles

from mahjong_table import codec
from mahjong_table.core.commands import DeclareMissingSuit, TableCommand
from mahjong_table.core.decide import Dice
from mahjong_table.core.events import TableEvent
from mahjong_table.core.state import SEAT_COUNT
from mahjong_table.formula.decide import execute as formula_execute
from mahjong_table.formula.decide import open_formula_table_with_wall
from mahjong_table.formula.evolve import fold as formula_fold
from mahjong_table.formula.state import FormulaTableState
from mahjong_table.selfplay import greedy_command
from mahjong_table.sichuan.decide import execute, open_table, open_table_with_wall
from mahjong_table.sichuan.evolve import fold
from mahjong_table.sichuan.state import TILE_KIND_COUNT, TableState

DEAL_ROUNDS = (4, 4, 4, 1)


def wall_for(
    hands: Sequence[str], dealer_seat: int = 0, head_draws: str = "", tail_draws: str = ""
) -> list[int]:
    """A 108-tile wall whose deal gives `hands` (per seat, compact notation, the dealer's 14) and
    whose next head draws and tail (kong replacement) draws are the given tiles, in order.

    The deal follows the rules library's order (4, 4, 4, 1 tiles per seat from the dealer, then
    one more for the dealer); every other tile fills the middle of the wall in sorted order.
    """
    parsed = [parse_tiles(hand) for hand in hands]
    assert len(parsed) == SEAT_COUNT
    for seat, hand in enumerate(parsed):
        assert len(hand) == (14 if seat == dealer_seat else 13), f"seat {seat} has {len(hand)} tiles"
    wall = _dealing_wall(
        parsed, dealer_seat, parse_tiles(head_draws), parse_tiles(tail_draws), list(SICHUAN_TILES)
    )
    assert len(wall) == 108
    return wall


SICHUAN_TILES = tuple(tile for tile in range(TILE_KIND_COUNT) for _ in range(4))


def _dealing_wall(
    hands: list[list[int]], dealer_seat: int, head: list[int], tail: list[int], tile_set: list[int]
) -> list[int]:
    """The deal of `hands` (4, 4, 4, 1 tiles per seat from the dealer, then one more for the
    dealer), then `head`, the rest of `tile_set` in sorted order, and `tail` drawn first-first."""
    used = Counter([tile for hand in hands for tile in hand] + head + tail)
    left = Counter(tile_set)
    assert all(count <= left[tile] for tile, count in used.items()), f"more copies than the set has: {used}"
    rest = sorted((left - used).elements())
    order = [(dealer_seat + offset) % SEAT_COUNT for offset in range(SEAT_COUNT)]
    positions = [0] * SEAT_COUNT
    wall: list[int] = []
    for size in DEAL_ROUNDS:
        for seat in order:
            wall.extend(hands[seat][positions[seat] : positions[seat] + size])
            positions[seat] += size
    wall.append(hands[dealer_seat][13])
    wall.extend(head)
    wall.extend(rest)
    wall.extend(reversed(tail))
    return wall


def dice_for_dealer(dealer_seat: int) -> Dice:
    """Dice that make `dealer_seat` the dealer: the roller is the dealer, sum 5."""
    return Dice(dealer_seat, 1, 4)


StateT = TypeVar("StateT")


@dataclass
class _Harness(Generic[StateT]):
    """A table under test: the events so far and the state folded from them."""

    events: list[TableEvent]
    state: StateT = field(init=False)

    def __post_init__(self) -> None:
        self.state = self._fold(self.events)

    def act(self, command: TableCommand) -> list[TableEvent]:
        """Decide and fold; returns the new events (a rule error propagates, nothing changes)."""
        new, self.state = self._execute(self.state, command)
        self.events.extend(new)
        return new

    @staticmethod
    def _fold(events: list[TableEvent]) -> StateT:
        raise NotImplementedError

    @staticmethod
    def _execute(state: StateT, command: TableCommand) -> tuple[list[TableEvent], StateT]:
        raise NotImplementedError


class Table(_Harness[TableState]):
    """A Sichuan Bloody table under test."""

    _fold = staticmethod(fold)
    _execute = staticmethod(execute)


def table_with_hands(
    hands: Sequence[str],
    *,
    dealer_seat: int = 0,
    head_draws: str = "",
    tail_draws: str = "",
    rules: RoomRules | None = None,
    missing_suits: str | None = None,
    exchange_direction: str = "counter_clockwise",
) -> Table:
    """A table dealt exactly `hands`. Without exchange three by default; with `missing_suits`
    (one letter per seat, e.g. "smmp") the declarations are made too, so the dealer is on turn."""
    rules = rules or RoomRules(exchange_three=False)
    wall = wall_for(hands, dealer_seat, head_draws, tail_draws)
    events = open_table_with_wall(
        "table-1",
        "room-1",
        rules,
        ["p0", "p1", "p2", "p3"],
        wall,
        exchange_direction=exchange_direction,
        dice=dice_for_dealer(dealer_seat),
    )
    table = Table(events)
    if missing_suits is not None:
        for seat, suit in enumerate(missing_suits):
            table.act(DeclareMissingSuit(seat, suit))
    return table


def tiles_accounted(state: TableState | FormulaTableState) -> int:
    """Every tile of the wall the table opened with, wherever it is now: the wall, the hands, the
    melds, the discards and (Formula) the flowers set aside, the indicator and the flowers turned
    before it. Always 108 or 144: a claimed tile moves, it is never copied."""
    total = state.wall_remaining
    for player in state.players:
        total += player.tile_count + len(player.discards) + sum(meld.size for meld in player.melds)
    if isinstance(state, FormulaTableState):
        total += 1 + len(state.turned_flowers) + sum(len(player.flowers) for player in state.players)
    return total


# ----------------------------------------------------------------------------------- formula


def formula_wall_for(
    hands: Sequence[str], *, indicator: str = "6z", head: str = "", tail: str = "", dealer_seat: int = 0
) -> list[int]:
    """A 144-tile formula wall dealing `hands` (the dealer's 14) with `indicator` turned up after
    the deal (RULES.md 2.1; 6z makes 7z the wildcard), then the head draws `head`, the rest in
    sorted order, and the tail draws `tail` (first drawn first: kong and flower replacements)."""
    parsed = [parse_tiles(hand, check_copies=False) for hand in hands]
    assert [len(hand) for hand in parsed] == [14 if seat == dealer_seat else 13 for seat in range(SEAT_COUNT)]
    head_tiles = parse_tiles(indicator + head, check_copies=False)
    tail_tiles = parse_tiles(tail, check_copies=False)
    wall = _dealing_wall(parsed, dealer_seat, head_tiles, tail_tiles, list(FORMULA_TILES))
    assert len(wall) == len(FORMULA_TILES)
    return wall


class FormulaTable(_Harness[FormulaTableState]):
    """A formula table under test."""

    _fold = staticmethod(formula_fold)
    _execute = staticmethod(formula_execute)


def formula_table_with_hands(
    hands: Sequence[str], rules: RoomRules, *, dealer_seat: int = 0, **wall: str
) -> FormulaTable:
    """A formula table dealt exactly `hands`, players p0..p3 (`wall`: indicator, head, tail)."""
    tiles = formula_wall_for(hands, dealer_seat=dealer_seat, **wall)
    events = open_formula_table_with_wall(
        "table-f", "room-f", rules, ["p0", "p1", "p2", "p3"], tiles, dice=dice_for_dealer(dealer_seat)
    )
    return FormulaTable(events)


# ----------------------------------------------------------------------------------- assignments


def table_assigned(
    table_id: str,
    players: Sequence[str],
    *,
    seed: int = 7,
    room_id: str = "test-room",
    turn_timeout_ms: int = 60_000,
    reconnect_grace_ms: int = 600_000,
) -> match_events_pb2.TableAssigned:
    """Matchmaking's TableAssigned of a Sichuan Bloody table seating `players` in order (the
    service tests and the routing benchmark open tables with it)."""
    return match_events_pb2.TableAssigned(
        table_id=table_id,
        room_id=room_id,
        seed=seed,
        seats=[
            match_events_pb2.SeatAssignment(seat=seat, player_id=player)
            for seat, player in enumerate(players)
        ],
        room=rooms_pb2.Room(
            room_id=room_id,
            rules=rooms_pb2.RoomRules(
                variant=common_pb2.VARIANT_SICHUAN_BLOODY,
                coefficient=100,
                turn_timeout_ms=turn_timeout_ms,
                reconnect_grace_ms=reconnect_grace_ms,
                exchange_three=True,
                skip_win_lock=True,
                self_draw_bonus="double",
                flower_pig_points=16,
                escape_cap_points=64,
                escape_correction=1,
                escape_penalty_floor=16,
                escape_compensation_floor=4,
                dealer_rotation="dice",
            ),
        ),
    )


# ----------------------------------------------------------------------------------- envelopes


def greedy_game_envelopes(
    count: int,
    *,
    players: Sequence[str],
    rules: RoomRules,
    start: datetime.datetime,
    room_id: str = "sichuan-test",
) -> list[list[envelope_pb2.Envelope]]:
    """`count` Sichuan games of `players`, every seat playing `selfplay.greedy_command`, one an hour
    after the other from `start` (an event a second), as the table service would put them on
    the table topic: game `i` is table `table-i`, dealt from seed `i`; event ids derive from the
    table and the sequence, so the same call gives the same envelopes."""
    games = []
    for index in range(count):
        table_id = f"table-{index}"
        events = open_table(table_id, room_id, rules, players, index)
        state = fold(events)
        while not state.is_over:
            new, state = execute(state, greedy_command(state))
            events.extend(new)
        begun = start + datetime.timedelta(hours=index)
        games.append(
            [
                new_envelope(
                    codec.to_message(event),
                    clock=_fixed_clock(begun + datetime.timedelta(seconds=sequence)),
                    stream_id=table_id,
                    sequence=sequence,
                    event_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{table_id}/{sequence}")),
                    correlation_id=table_id,
                )
                for sequence, event in enumerate(events, start=1)
            ]
        )
    return games


def _fixed_clock(moment: datetime.datetime) -> Callable[[], datetime.datetime]:
    return lambda: moment
