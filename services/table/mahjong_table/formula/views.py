"""What one seat may see and do at a Formula table: `legal_actions` and `view_for` (the kernel's
`TableView`, with flowers, wildcard and bird filled in). Events are redacted by the kernel
(`mahjong_table.core.views.redact`): the Formula events are public as they are (RULES.md 2.1, 2.3).
"""

from __future__ import annotations

from mahjong_table.core.state import Phase
from mahjong_table.core.tiles import code_of
from mahjong_table.core.views import (
    ACTION_CHOW,
    ACTION_DISCARD,
    ACTION_KONG,
    LEAVE,
    PASS,
    PONG,
    WIN,
    LegalAction,
    SeatView,
    TableView,
    seat_view,
    shows_concealed_kongs,
    table_view,
)
from mahjong_table.formula import hands
from mahjong_table.formula.state import ASK_CHOW, ASK_KONG, ASK_PONG, ASK_WIN, FormulaTableState


def legal_actions(state: FormulaTableState, seat: int) -> tuple[LegalAction, ...]:
    """The commands `seat` may send now (win first when offered); empty once it cannot act.

    The last answer is kept (`_last_legal_actions`): a feed asks whether its seat decides
    (`wire.decides`) and then builds the seat's view of the same state, which asks again (a
    self-draw win's check searches the wildcards)."""
    global _last_legal_actions
    last = _last_legal_actions
    if last[0] is state and last[1] == seat:
        return last[2]
    actions = _legal_actions(state, seat)
    _last_legal_actions = (state, seat, actions)  # one tuple: read whole by any thread
    return actions


_last_legal_actions: tuple[object, int, tuple[LegalAction, ...]] = (None, -1, ())


def _legal_actions(state: FormulaTableState, seat: int) -> tuple[LegalAction, ...]:
    if state.is_over:
        return ()
    player = state.players[seat]
    if player.left:
        return ()
    if player.won:
        return (LEAVE,)
    actions: list[LegalAction] = []
    window = state.window
    if state.phase is Phase.TURN and state.turn_seat == seat:
        if hands.self_draw_win(state, seat) is not None:
            actions.append(WIN)
        kongs = hands.kong_options(state, seat)
        if kongs:
            actions.append(LegalAction(ACTION_KONG, tuple(code_of(tile) for tile, _ in kongs)))
        actions.append(LegalAction(ACTION_DISCARD, tuple(code_of(t) for t in hands.discardable(player))))
    elif state.phase is Phase.CLAIM and window is not None and window.current is not None:
        ask = window.current
        if ask.seat == seat:
            if ASK_WIN in ask.kinds:
                actions.append(WIN)
            if ASK_KONG in ask.kinds:
                actions.append(LegalAction(ACTION_KONG, (code_of(window.tile),)))
            if ASK_PONG in ask.kinds:
                actions.append(PONG)
            if ASK_CHOW in ask.kinds:
                actions.append(LegalAction(ACTION_CHOW, tuple(code_of(tile) for tile in ask.chows)))
            actions.append(PASS)
    actions.append(LEAVE)
    return tuple(actions)


def _seat_view(state: FormulaTableState, seat: int, viewer_seat: int) -> SeatView:
    """The public facts about `seat` as `viewer_seat` sees them, with the flowers it set aside."""
    player = state.players[seat]
    return seat_view(
        state,
        seat,
        viewer_seat,
        family_facts=lambda: {"flowers": tuple(code_of(tile) for tile in player.flowers)},
    )


_SEAT_VIEW_KEYS = tuple(tuple(("seat_view", seat, kongs) for kongs in (False, True)) for seat in range(4))
"""The memo keys `seat_view` files a seat's view under (`_SEAT_VIEW_KEYS[seat][kongs]`: the
concealed kongs' tiles shown), made once."""


def _seat_views(state: FormulaTableState, viewer_seat: int) -> tuple[SeatView, ...]:
    """`_seat_view` of every seat for `viewer_seat`: each memoised view found on its player under
    the key `seat_view` files it under, without building the flowers to look it up."""
    over = state.phase is Phase.ENDED
    views = []
    for seat, player in enumerate(state.players):
        # `shows_concealed_kongs`, asked only when its cheaper tests do not answer (shown).
        kongs = (
            seat == viewer_seat
            or over
            or not player.melds
            or shows_concealed_kongs(state, player, seat, viewer_seat)
        )
        view: SeatView | None = player.derived.get(_SEAT_VIEW_KEYS[seat][kongs])
        views.append(_seat_view(state, seat, viewer_seat) if view is None else view)
    return tuple(views)


def view_for(state: FormulaTableState, seat: int) -> TableView:
    """The seat's view: own hand, every meld, discard and flower, the wildcard, the bird, whose
    turn, the legal actions now and the tile the seat is asked about."""
    return table_view(
        state,
        seat,
        hand=tuple(code_of(tile) for tile in state.players[seat].concealed_tiles()),
        seats=_seat_views(state, seat),
        legal_actions=legal_actions(state, seat),
        waits=_waits(state, seat),
        wildcard_indicator=code_of(state.wildcard_indicator),
        wildcard=code_of(state.wildcard),
        bird_tile=code_of(state.bird_tile) if state.bird_tile is not None else "",
        bird_seat=state.bird_seat,
    )


def _waits(state: FormulaTableState, seat: int) -> tuple[str, ...]:
    """The view's waits hint, memoised on the seat's player (the wildcard, the room's rules and
    the seat's wind do not change during a hand)."""
    player = state.players[seat]
    waits: tuple[str, ...] | None = player.derived.get("waits")
    if waits is None:
        waits = tuple(code_of(tile) for tile in hands.waiting_tiles(state, seat))
        player.derived["waits"] = waits
    return waits
