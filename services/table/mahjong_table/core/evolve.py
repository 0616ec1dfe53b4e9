"""The fold both families share: `make_fold` (the driver every family's `evolve` and `fold` are), the fold
steps that change the players the same way (the seats, the deal, a draw from the wall, a discard,
a pong, a kong, a robbed kong, a leave) and the events every family folds alike (`TurnTimedOut`,
`WallExhausted`, `GameEnded`).

Events are facts: a fold never rejects one; it asserts invariants instead (a broken invariant is
a bug in `decide`, not an input error).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from mahjong_table.core.events import (
    EXPOSURE_ADDED,
    EXPOSURE_CONCEALED,
    EXPOSURE_EXPOSED,
    NO_SEAT,
    TIMEOUT_PHASE_CLAIM,
    GameEnded,
    HandsDealt,
    KongDeclared,
    PongClaimed,
    SeatAssignment,
    TableEvent,
    TableOpened,
    TileDrawn,
    TurnTimedOut,
    WallExhausted,
)
from mahjong_table.core.state import (
    SEAT_COUNT,
    MeldState,
    Phase,
    PlayerShape,
    TableShape,
    add_count,
    added_kong_to_pong,
    copier_setting,
    hidden_from_all_but,
    pong_to_added_kong,
    pop_discard,
    replaced,
    with_player,
)

_State = TypeVar("_State", bound=TableShape)
_P = TypeVar("_P", bound=PlayerShape)


Evolve = Callable[[_State | None, TableEvent], _State]


class Fold(Protocol[_State]):
    """A family's fold of a stream of events (from the first, or onto `state`)."""

    def __call__(self, events: Iterable[TableEvent], state: _State | None = None) -> _State: ...


def make_fold(
    family: str,
    opened: Callable[[TableOpened], _State],
    handlers: dict[type[Any], Callable[[Any, Any], _State]],
) -> tuple[Evolve[_State], Fold[_State]]:
    """The family's `evolve(state, event) -> state` and `fold(events, state=None) -> state`:
    `opened` folds the first event (`TableOpened`), `handlers` every later one by its type, and
    the kernel the events every family folds alike (`TurnTimedOut`, `WallExhausted`,
    `GameEnded`); each fold counts the version. With `opened` and the kernel's, `handlers` fold
    exactly the event registry's events of the family (`mahjong_platform.events`,
    tests/test_event_registry.py).

    The fold is the engine's hot path: a handler returns a fresh value nobody holds yet, or the
    state itself when the event changes nothing, so the version is stamped in place on the fresh
    value (no second copy)."""
    by_type: dict[type[Any], Callable[[Any, Any], Any]] = {**KERNEL_FOLDS, **handlers}

    def evolve(state: _State | None, event: TableEvent) -> _State:
        """Fold one event into the state. `state` is None only before `TableOpened`."""
        handler = by_type.get(type(event))
        if handler is None:
            assert isinstance(event, TableOpened), f"{type(event).__name__} is not a {family} table event"
            assert state is None, "TableOpened must be the first event"
            return replaced(opened(event), version=1)
        assert state is not None, f"{type(event).__name__} before TableOpened"
        assert state.phase is not Phase.ENDED, f"{type(event).__name__} after GameEnded"
        after: _State = handler(state, event)
        if after is state:
            return replaced(state, version=state.version + 1)
        object.__setattr__(after, "version", state.version + 1)
        return after

    def fold(events: Iterable[TableEvent], state: _State | None = None) -> _State:
        """Fold a stream of events (from the first, or onto `state`)."""
        for event in events:
            state = evolve(state, event)
        assert state is not None, "no events to fold"
        return state

    return evolve, fold


# -------------------------------------------------------------------- how the players change


def seated(event: TableOpened, player: Callable[[str], _P]) -> tuple[_P, ...]:
    """The players of a table just opened, in seat order (`player` makes one from its id)."""
    assert len(event.seats) == SEAT_COUNT
    seats: list[SeatAssignment] = sorted(event.seats, key=lambda seat: seat.seat)
    return tuple(player(seat.player_id) for seat in seats)


def dealt(players: tuple[_P, ...], event: HandsDealt, parse: Callable[[str], int]) -> tuple[_P, ...]:
    """The players after the deal: each holds the tiles dealt to its seat."""
    updated = list(players)
    for hand in event.hands:
        counts = list(updated[hand.seat].concealed)
        for code in hand.tiles:
            counts[parse(code)] += 1
        assert max(counts) <= 4, f"seat {hand.seat} dealt more than four of a tile"
        updated[hand.seat] = replaced(updated[hand.seat], concealed=tuple(counts))
    return tuple(updated)


def wall_after_draw(state: TableShape, event: TileDrawn, tile: int) -> tuple[int, int]:
    """The wall's head and tail after the draw `event` of `tile` (from the head, or the tail)."""
    if event.from_tail:
        assert state.wall[state.wall_tail - 1] == tile, "tail draw does not match the wall"
        head, tail = state.wall_head, state.wall_tail - 1
    else:
        assert state.wall[state.wall_head] == tile, "head draw does not match the wall"
        head, tail = state.wall_head + 1, state.wall_tail
    assert tail - head == event.wall_remaining
    return head, tail


def discarded(player: _P, tile: int) -> _P:
    """The player after discarding `tile`: out of the hand, onto the discard pile."""
    cls = type(player)
    copy = _PLAYER_DISCARD_COPIERS.get(cls)
    if copy is None:
        copy = _PLAYER_DISCARD_COPIERS[cls] = copier_setting(cls, "concealed", "discards")
    after: _P = copy(
        player, concealed=add_count(player.concealed, tile, -1), discards=(*player.discards, tile)
    )
    return after


def tile_discarded(state: _State, seat: int, tile: int, **changes: object) -> _State:
    """The state after `seat` discarded `tile`: out of its hand onto its pile, no drawn tile, the
    claim phase (with the family's `changes`, the same names at every discard of a family; the
    family opens the window on it)."""
    players = with_player(tuple(state.players), seat, discarded(state.players[seat], tile))
    key = (type(state), *changes)
    copy = _TABLE_DISCARD_COPIERS.get(key)
    if copy is None:
        names = ("players", "phase", "drawn_tile", *changes)
        copy = _TABLE_DISCARD_COPIERS[key] = copier_setting(type(state), *names)
    after: _State = copy(state, players=players, phase=Phase.CLAIM, drawn_tile=None, **changes)
    return after


_PLAYER_DISCARD_COPIERS: dict[type, Callable[..., Any]] = {}
_TABLE_DISCARD_COPIERS: dict[tuple[object, ...], Callable[..., Any]] = {}
"""The copies a discard makes (with the draw, the engine's most frequent fold), by the player's
class, and by the state's class and the family's changes (`copier_setting`)."""


def ponged(players: tuple[_P, ...], event: PongClaimed, tile: int) -> tuple[_P, ...]:
    """The players after the pong `event`: the discard leaves its pile, two copies leave the
    claimant's hand, the pong is laid open (RULES.md 1.4, 2.1)."""
    players = pop_discard(players, event.from_seat, tile)
    player = players[event.seat]
    meld = MeldState("pong", tile, "", event.from_seat)
    updated = replaced(player, concealed=add_count(player.concealed, tile, -2), melds=(*player.melds, meld))
    return with_player(players, event.seat, updated)


def konged(players: tuple[_P, ...], event: KongDeclared, tile: int) -> tuple[_P, ...]:
    """The players after the kong `event` (RULES.md 1.5, 2.1): an exposed kong takes the discard,
    a concealed kong four held tiles, an added kong turns the seat's pong into a kong."""
    if event.exposure == EXPOSURE_EXPOSED:
        players = pop_discard(players, event.from_seat, tile)
        taken, meld = 3, MeldState("kong", tile, EXPOSURE_EXPOSED, event.from_seat)
        melds = (*players[event.seat].melds, meld)
    elif event.exposure == EXPOSURE_CONCEALED:
        taken, melds = 4, (*players[event.seat].melds, MeldState("kong", tile, EXPOSURE_CONCEALED))
    else:
        assert event.exposure == EXPOSURE_ADDED
        taken, melds = 1, pong_to_added_kong(players[event.seat].melds, tile)
    player = players[event.seat]
    updated = replaced(player, concealed=add_count(player.concealed, tile, -taken), melds=melds)
    return with_player(players, event.seat, updated)


def kong_robbed(players: tuple[_P, ...], kong_seat: int, tile: int) -> tuple[_P, ...]:
    """The players after the added kong of `tile` was robbed (RULES.md 1.5, 2.2): the kong is
    void, the pong stays and the robbed tile lies in the declarer's discards."""
    player = players[kong_seat]
    robbed = replaced(player, melds=added_kong_to_pong(player.melds, tile), discards=(*player.discards, tile))
    return with_player(players, kong_seat, robbed)


def left(players: tuple[_P, ...], seat: int) -> tuple[_P, ...]:
    """The players after `seat` left (RULES.md 1.10, 2.3)."""
    player = players[seat]
    assert not player.left
    return with_player(players, seat, replaced(player, left=True))


# ------------------------------------------------------------ events every family folds alike


def turn_timed_out(state: _State, event: TurnTimedOut) -> _State:
    """A claim timeout is hidden from the other seats, as the pass it causes; others change nothing."""
    if event.phase == TIMEOUT_PHASE_CLAIM:
        return replaced(state, hidden_counts=hidden_from_all_but(state.hidden_counts, event.seat))
    return state


def wall_exhausted(state: _State, event: WallExhausted) -> _State:
    """The wall is empty (RULES.md 1.6, 2.1)."""
    assert state.wall_remaining == 0
    return replaced(state, wall_exhausted=True)


def game_ended(state: _State, event: GameEnded) -> _State:
    """The game is over: no window, nobody on turn."""
    return replaced(state, phase=Phase.ENDED, end_reason=event.reason, window=None, turn_seat=NO_SEAT)


KERNEL_FOLDS: dict[type[Any], Callable[[Any, Any], Any]] = {
    TurnTimedOut: turn_timed_out,
    WallExhausted: wall_exhausted,
    GameEnded: game_ended,
}
"""The events the kernel folds for every family (`make_fold`)."""

__all__ = [
    "KERNEL_FOLDS",
    "dealt",
    "discarded",
    "game_ended",
    "kong_robbed",
    "konged",
    "left",
    "make_fold",
    "ponged",
    "seated",
    "tile_discarded",
    "turn_timed_out",
    "wall_after_draw",
    "wall_exhausted",
]
