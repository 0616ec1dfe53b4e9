"""The entry of scoring's fold of one game: `apply_table_event(state, envelope)` is a pure step,
the new state and the `Step`s the event causes, in order.

It checks what holds for every event (seen before? a payload? after `TableOpened`? before the
end?), folds `TableOpened` itself (`GameOpened`: the options and accounts, either family), and
hands every later event to its family's fold: `sichuan.fold_sichuan_event` or
`formula.fold_formula_event`, chosen by the room's rules snapshot. Events after `GameEnded`
change nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from mahjong.v1 import envelope_pb2
from mahjong_rules.settlement import SEAT_COUNT

from mahjong_scoring.game_facts.formula import fold_formula_event
from mahjong_scoring.game_facts.reading import any_tile, check_seat
from mahjong_scoring.game_facts.room_options import formula_options, settlement_options
from mahjong_scoring.game_facts.sichuan import fold_sichuan_event
from mahjong_scoring.game_facts.state import GameFactsState, evolve
from mahjong_scoring.game_facts.steps import GameFactsError, GameOpened, Step

PLAYER_ACCOUNT_PREFIX: Final = "player:"
# Events of one game: a 108-tile wall gives at most a few hundred; far more is a broken stream.
GAME_EVENTS_MAX: Final = 5_000


def new_game_facts() -> GameFactsState:
    """The state before a game's first event."""
    return GameFactsState()


def apply_table_event(
    state: GameFactsState, envelope: envelope_pb2.Envelope
) -> tuple[GameFactsState, tuple[Step, ...]]:
    """Fold one table event: the new state and the steps it causes, in order.

    An event id seen before changes nothing (duplicate deliveries and re-sends are harmless).
    Raises `GameFactsError` for an event that contradicts the game so far.
    """
    if envelope.event_id in state.applied_event_ids:
        return state, ()
    if len(state.applied_event_ids) >= GAME_EVENTS_MAX:
        raise GameFactsError(f"table {envelope.stream_id} has more than {GAME_EVENTS_MAX} events")
    payload_name = envelope.WhichOneof("payload")
    if payload_name is None:
        raise GameFactsError(f"event {envelope.event_id} has no payload")
    steps: list[Step] = []
    if payload_name == "table_opened":
        state = _table_opened(state, envelope, steps)
    elif state.opened is None:
        raise GameFactsError(f"{payload_name} of table {envelope.stream_id} arrived before TableOpened")
    elif not state.over and state.opened.formula is not None:
        state = fold_formula_event(state, envelope, payload_name, steps)
    elif not state.over:
        state = fold_sichuan_event(state, envelope, payload_name, steps)
    return evolve(state, applied_event_ids=state.applied_event_ids | {envelope.event_id}), tuple(steps)


def apply_table_events(
    state: GameFactsState, envelopes: Sequence[envelope_pb2.Envelope]
) -> tuple[GameFactsState, tuple[Step, ...]]:
    """Fold several table events in order: the final state and all their steps."""
    steps: list[Step] = []
    for envelope in envelopes:
        state, new_steps = apply_table_event(state, envelope)
        steps.extend(new_steps)
    return state, tuple(steps)


def _table_opened(
    state: GameFactsState, envelope: envelope_pb2.Envelope, steps: list[Step]
) -> GameFactsState:
    event = envelope.table_opened
    if state.opened is not None:
        raise GameFactsError(f"table {envelope.stream_id} opened twice")
    if event.table_id != envelope.stream_id:
        raise GameFactsError(f"TableOpened names table {event.table_id!r} on stream {envelope.stream_id!r}")
    accounts = [""] * SEAT_COUNT
    for seat_assignment in event.seats:
        check_seat(seat_assignment.seat, "seat assignment")
        if not seat_assignment.player_id:
            raise GameFactsError(f"seat {seat_assignment.seat} has no player id")
        accounts[seat_assignment.seat] = PLAYER_ACCOUNT_PREFIX + seat_assignment.player_id
    if not all(accounts):
        raise GameFactsError(f"TableOpened must seat {SEAT_COUNT} players, got {len(event.seats)}")
    check_seat(event.dealer_seat, "dealer")
    opened = GameOpened(
        source=envelope.event_id,
        table_id=event.table_id,
        room_id=event.room_id,
        options=settlement_options(event.rules),
        accounts=tuple(accounts),
        formula=formula_options(event.rules),
        wildcard=any_tile(event.wildcard) if event.wildcard else None,
    )
    steps.append(opened)
    return evolve(state, opened=opened, dealer_seat=event.dealer_seat)
