"""`evolve(state, event) -> state`: the only way a Sichuan table's state comes to be (RULES.md
1.1-1.6, 1.10), on the kernel's fold (`mahjong_table.core.evolve`).

Events are facts, so `evolve` never rejects one; it asserts invariants instead (a broken invariant
is a bug in `decide`, not an input error). Claim windows are derived here from the rules, so the
stream needs no hidden "who may claim" field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mahjong_rules.wall import WALL_TILE_COUNT

from mahjong_table.core import evolve as kernel
from mahjong_table.core.events import (
    DIRECTION_CLOCKWISE,
    DIRECTION_COUNTER_CLOCKWISE,
    DIRECTION_OPPOSITE,
    EXPOSURE_ADDED,
    WIN_BY_SELF_DRAW,
    ClaimPassed,
    ExchangePicked,
    HandsDealt,
    KongDeclared,
    KongRobbed,
    MissingSuitChosen,
    MissingSuitsDeclared,
    PlayerLeft,
    PlayerWon,
    PongClaimed,
    TableOpened,
    TileDiscarded,
    TileDrawn,
    TilesExchanged,
)
from mahjong_table.core.state import (
    SEAT_COUNT,
    Phase,
    add_count,
    copier_setting,
    hidden_from_all_but,
    replaced,
    stamped,
    with_player,
)
from mahjong_table.sichuan import hands
from mahjong_table.sichuan.rules_adapter import SUIT_CODES, parse_code, parse_codes
from mahjong_table.sichuan.state import PlayerState, TableState, WindowKind, WindowStage

EXCHANGE_OFFSETS = {DIRECTION_CLOCKWISE: -1, DIRECTION_COUNTER_CLOCKWISE: 1, DIRECTION_OPPOSITE: 2}
"""RULES.md 1.2: clockwise gives to seat-1, counter-clockwise to seat+1, opposite to seat+2."""


def exchange_receiver(from_seat: int, direction: str) -> int:
    """The seat that receives `from_seat`'s three tiles in `direction`."""
    return (from_seat + EXCHANGE_OFFSETS[direction]) % SEAT_COUNT


def _opened(event: TableOpened) -> TableState:
    assert len(event.wall) == WALL_TILE_COUNT
    return TableState(
        table_id=event.table_id,
        room_id=event.room_id,
        rules=event.rules,
        dealer_seat=event.dealer_seat,
        exchange_direction=event.exchange_direction,
        wall=parse_codes(event.wall),
        players=kernel.seated(event, _new_player),
    )


def _new_player(player_id: str) -> PlayerState:
    return PlayerState(player_id=player_id)


def _dealt(state: TableState, event: HandsDealt) -> TableState:
    phase = Phase.EXCHANGE if state.rules.exchange_three and state.exchange_direction else Phase.MISSING_SUIT
    return replaced(
        state,
        players=kernel.dealt(state.players, event, parse_code),
        wall_head=state.wall_tail - event.wall_remaining,
        phase=phase,
    )


def _exchange_picked(state: TableState, event: ExchangePicked) -> TableState:
    player = state.players[event.seat]
    assert player.exchange_pick is None
    pick = tuple(parse_code(code) for code in event.tiles)
    return replaced(
        state, players=with_player(state.players, event.seat, replaced(player, exchange_pick=pick))
    )


def _tiles_exchanged(state: TableState, event: TilesExchanged) -> TableState:
    held = [list(player.concealed) for player in state.players]
    for transfer in event.transfers:
        for code in transfer.tiles:
            tile = parse_code(code)
            held[transfer.from_seat][tile] -= 1
            held[transfer.to_seat][tile] += 1
    for counts in held:
        assert min(counts) >= 0 and max(counts) <= 4, "the exchange gave a count out of 0..4"
    players = tuple(
        replaced(player, concealed=tuple(held[seat])) for seat, player in enumerate(state.players)
    )
    return replaced(state, players=players, phase=Phase.MISSING_SUIT)


def _missing_suit_chosen(state: TableState, event: MissingSuitChosen) -> TableState:
    player = state.players[event.seat]
    assert player.missing_suit is None
    chosen = replaced(player, missing_suit=SUIT_CODES.index(event.suit))
    return replaced(state, players=with_player(state.players, event.seat, chosen))


def _missing_suits_declared(state: TableState, event: MissingSuitsDeclared) -> TableState:
    # RULES.md 1.4: the dealer starts by discarding (14 tiles, no draw).
    return replaced(
        state, missing_suits_public=True, phase=Phase.TURN, turn_seat=state.dealer_seat, drawn_tile=None
    )


def _tile_drawn(state: TableState, event: TileDrawn) -> TableState:
    tile = parse_code(event.tile)
    head, tail = kernel.wall_after_draw(state, event, tile)
    player = state.players[event.seat]
    drawn = _player_after_draw(
        player,
        concealed=add_count(player.concealed, tile, 1),
        draw_count=player.draw_count + 1,
        skip_win_multiplier=0,  # RULES.md 1.4: the skip-win lock lasts until the player's own next draw
    )
    return _table_after_draw(
        state,
        players=with_player(state.players, event.seat, drawn),
        wall_head=head,
        wall_tail=tail,
        phase=Phase.TURN,
        turn_seat=event.seat,
        drawn_tile=tile,
        turn_after_meld=False,
        turn_after_kong=event.from_tail,
        window=None,
    )


_player_after_draw = copier_setting(PlayerState, "concealed", "draw_count", "skip_win_multiplier")
_table_after_draw = copier_setting(
    TableState,
    "players",
    "wall_head",
    "wall_tail",
    "phase",
    "turn_seat",
    "drawn_tile",
    "turn_after_meld",
    "turn_after_kong",
    "window",
)
"""The copies a draw makes (the engine's most frequent fold with the discard), each slot set once."""


def _tile_discarded(state: TableState, event: TileDiscarded) -> TableState:
    tile = parse_code(event.tile)
    after = kernel.tile_discarded(
        state,
        event.seat,
        tile,
        discard_count=state.discard_count + 1,
        turn_after_kong=False,
        turn_after_meld=False,
    )
    window = hands.open_window(after, WindowKind.DISCARD, tile, event.seat, state.turn_after_kong)
    return stamped(after, window=window)


def _claim_passed(state: TableState, event: ClaimPassed) -> TableState:
    window = state.window
    assert window is not None and event.seat in window.pending
    players = state.players
    if event.passed_win and state.rules.skip_win_lock:
        player = players[event.seat]
        locked = replaced(
            player, skip_win_multiplier=max(player.skip_win_multiplier, event.passed_win_multiplier)
        )
        players = with_player(state.players, event.seat, locked)
    after = replaced(
        state,
        players=players,
        window=replaced(window, pending=window.pending - {event.seat}),
        hidden_counts=hidden_from_all_but(state.hidden_counts, event.seat),
    )
    return _after_answer(after)


def _after_answer(fresh: TableState) -> TableState:
    """When the win stage has been answered by all and nobody won, the meld stage opens (on the
    state the caller has just built)."""
    window = fresh.window
    assert window is not None
    if window.stage is WindowStage.WIN and not window.pending and not window.winners:
        return stamped(fresh, window=hands.meld_stage(fresh, window))
    return fresh


def _pong_claimed(state: TableState, event: PongClaimed) -> TableState:
    return replaced(
        state,
        players=kernel.ponged(state.players, event, parse_code(event.tile)),
        phase=Phase.TURN,
        turn_seat=event.seat,
        drawn_tile=None,
        turn_after_meld=True,
        turn_after_kong=False,
        window=None,
        melds_in_game=True,
    )


def _kong_declared(state: TableState, event: KongDeclared) -> TableState:
    tile = parse_code(event.tile)
    after = replaced(
        state,
        players=kernel.konged(state.players, event, tile),
        phase=Phase.TURN,
        turn_seat=event.seat,
        drawn_tile=None,
        turn_after_meld=False,
        window=None,
        melds_in_game=True,
    )
    if event.exposure != EXPOSURE_ADDED:
        return after
    # RULES.md 1.5: the added tile is open to robbing (wins only) before the replacement draw.
    window = hands.open_window(after, WindowKind.ROB_KONG, tile, event.seat, False)
    return stamped(after, phase=Phase.CLAIM, window=window)


def _kong_robbed(state: TableState, event: KongRobbed) -> TableState:
    return replaced(state, players=kernel.kong_robbed(state.players, event.kong_seat, parse_code(event.tile)))


def _player_won(state: TableState, event: PlayerWon) -> TableState:
    player = state.players[event.seat]
    assert player.in_game, "a seat that won or left cannot win"
    won = replaced(player, won=True, win_order=event.win_order)
    after = replaced(
        state, players=with_player(state.players, event.seat, won), win_count=state.win_count + 1
    )
    if event.win_by == WIN_BY_SELF_DRAW:
        return stamped(after, drawn_tile=None)
    window = state.window
    assert window is not None and event.seat in window.pending
    return stamped(
        after,
        window=replaced(window, pending=window.pending - {event.seat}, winners=(*window.winners, event.seat)),
    )


def _player_left(state: TableState, event: PlayerLeft) -> TableState:
    after = replaced(state, players=kernel.left(state.players, event.seat))
    window = after.window
    if window is not None and event.seat in window.pending:
        after = _after_answer(replaced(after, window=replaced(window, pending=window.pending - {event.seat})))
    return after


HANDLERS: dict[type[Any], Callable[[Any, Any], TableState]] = {
    HandsDealt: _dealt,
    ExchangePicked: _exchange_picked,
    TilesExchanged: _tiles_exchanged,
    MissingSuitChosen: _missing_suit_chosen,
    MissingSuitsDeclared: _missing_suits_declared,
    TileDrawn: _tile_drawn,
    TileDiscarded: _tile_discarded,
    ClaimPassed: _claim_passed,
    PongClaimed: _pong_claimed,
    KongDeclared: _kong_declared,
    KongRobbed: _kong_robbed,
    PlayerWon: _player_won,
    PlayerLeft: _player_left,
}
"""The Sichuan events' folds but `TableOpened`'s and the kernel's (`core.evolve.make_fold`)."""


evolve, fold = kernel.make_fold("Sichuan", _opened, HANDLERS)
"""`evolve(state, event)` folds one event into the state (`state` is None only before
`TableOpened`); `fold(events, state=None)` a stream of them."""
