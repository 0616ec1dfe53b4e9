"""What one seat may see and do at a formula table: `legal_actions`, `view_for` (the same
`TableView` as Sichuan, with flowers, wildcard and bird filled in) and `redact`.

Redaction is the Sichuan one (`mahjong_table.sichuan.views.redact`): the wall, others' dealt hands,
others' draws (補花 replacements included) and others' claim passes are hidden; the wildcard
indicator and wildcard (in `TableOpened`), `FlowerReplaced`, `ChowClaimed` and `BirdRevealed` are
public as they are (RULES.md 2.1, 2.3).
"""

from __future__ import annotations

from dataclasses import replace

from mahjong_rules.tiles import tile_code

from mahjong_table.core.events import EXPOSURE_CONCEALED, NO_SEAT, TableEvent
from mahjong_table.core.state import Phase
from mahjong_table.formula import hands
from mahjong_table.formula.decide import meld_event
from mahjong_table.formula.state import ASK_CHOW, ASK_KONG, ASK_PONG, ASK_WIN, FormulaTableState
from mahjong_table.sichuan.views import (
    ACTION_CHOW,
    ACTION_DISCARD,
    ACTION_KONG,
    ACTION_LEAVE,
    ACTION_PASS,
    ACTION_PONG,
    ACTION_WIN,
    LegalAction,
    SeatView,
    TableView,
)
from mahjong_table.sichuan.views import redact as sichuan_redact


def legal_actions(state: FormulaTableState, seat: int) -> tuple[LegalAction, ...]:
    """The commands `seat` may send now (win first when offered); empty once it cannot act."""
    if state.is_over:
        return ()
    player = state.players[seat]
    if player.left:
        return ()
    leave = LegalAction(ACTION_LEAVE)
    if player.won:
        return (leave,)
    actions: list[LegalAction] = []
    window = state.window
    if state.phase is Phase.TURN and state.turn_seat == seat:
        if hands.self_draw_win(state, seat) is not None:
            actions.append(LegalAction(ACTION_WIN))
        kongs = hands.kong_options(state, seat)
        if kongs:
            actions.append(LegalAction(ACTION_KONG, tuple(tile_code(tile) for tile, _ in kongs)))
        actions.append(LegalAction(ACTION_DISCARD, tuple(tile_code(t) for t in hands.discardable(player))))
    elif state.phase is Phase.CLAIM and window is not None and window.current is not None:
        ask = window.current
        if ask.seat == seat:
            if ASK_WIN in ask.kinds:
                actions.append(LegalAction(ACTION_WIN))
            if ASK_KONG in ask.kinds:
                actions.append(LegalAction(ACTION_KONG, (tile_code(window.tile),)))
            if ASK_PONG in ask.kinds:
                actions.append(LegalAction(ACTION_PONG))
            if ASK_CHOW in ask.kinds:
                actions.append(LegalAction(ACTION_CHOW, tuple(tile_code(tile) for tile in ask.chows)))
            actions.append(LegalAction(ACTION_PASS))
    actions.append(leave)
    return tuple(actions)


def _seat_view(state: FormulaTableState, seat: int, viewer_seat: int) -> SeatView:
    """The public facts about `seat` as `viewer_seat` sees them, memoised on the seat's player
    (the other seats' players stay the same objects while one seat acts)."""
    player = state.players[seat]
    show_concealed_kongs = (
        not player.melds
        or seat == viewer_seat
        or state.is_over
        or all(meld.exposure != EXPOSURE_CONCEALED for meld in player.melds)
    )
    key = ("seat_view", seat, show_concealed_kongs)
    view: SeatView | None = player.derived.get(key)
    if view is None:
        view = SeatView(
            seat=seat,
            player_id=player.player_id,
            concealed_tile_count=player.tile_count,
            melds=tuple(
                replace(meld_event(meld), tile="")
                if meld.exposure == EXPOSURE_CONCEALED and not show_concealed_kongs
                else meld_event(meld)
                for meld in player.melds
            ),
            discards=tuple(tile_code(tile) for tile in player.discards),
            missing_suit="",
            exchange_picked=False,
            missing_suit_chosen=False,
            won=player.won,
            left=player.left,
            flowers=tuple(tile_code(tile) for tile in player.flowers),
        )
        player.derived[key] = view
    return view


def view_for(state: FormulaTableState, seat: int) -> TableView:
    """The seat's view: own hand, every meld, discard and flower, the wildcard, the bird, whose
    turn, the legal actions now and the tile the seat is asked about."""
    player = state.players[seat]
    window = state.window
    asked = window is not None and seat in window.pending
    seats = tuple(_seat_view(state, other, seat) for other in range(len(state.players)))
    own_turn = state.phase is Phase.TURN and state.turn_seat == seat
    return TableView(
        table_id=state.table_id,
        viewer_seat=seat,
        phase=state.phase.value,
        dealer_seat=state.dealer_seat,
        turn_seat=state.turn_seat,
        hand=tuple(tile_code(tile) for tile in player.concealed_tiles()),
        drawn_tile=tile_code(state.drawn_tile) if state.drawn_tile is not None and own_turn else "",
        exchange_pick=(),
        exchange_direction="",
        seats=seats,
        wall_remaining=state.wall_remaining,
        claimable_tile=tile_code(window.tile) if asked and window is not None else "",
        claim_from_seat=window.from_seat if asked and window is not None else NO_SEAT,
        legal_actions=legal_actions(state, seat),
        waits=_waits(state, seat),
        end_reason=state.end_reason,
        version=state.version,
        wildcard_indicator=tile_code(state.wildcard_indicator),
        wildcard=tile_code(state.wildcard),
        bird_tile=tile_code(state.bird_tile) if state.bird_tile is not None else "",
        bird_seat=state.bird_seat,
    )


def _waits(state: FormulaTableState, seat: int) -> tuple[str, ...]:
    """The view's waits hint, memoised on the seat's player (the wildcard, the room's rules and
    the seat's wind do not change during a hand)."""
    player = state.players[seat]
    waits: tuple[str, ...] | None = player.derived.get("waits")
    if waits is None:
        waits = tuple(tile_code(tile) for tile in hands.waiting_tiles(state, seat))
        player.derived["waits"] = waits
    return waits


def redact(event: TableEvent, viewer_seat: int | None) -> TableEvent | None:
    """The event as `viewer_seat` may see it (see the module docstring), or None."""
    return sichuan_redact(event, viewer_seat)
