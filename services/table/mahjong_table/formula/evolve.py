"""`evolve(state, event) -> state` for the formula family (RULES.md 2.1-2.3), on the kernel's
fold (`mahjong_table.core.evolve`).

Events are facts: `evolve` never rejects one and asserts invariants instead. The claim window on a
discard is derived here from the hands (who may win, pong, kong or chow, in priority order), so the
stream carries no hidden "who was asked" field.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from mahjong_rules.formula.wall import FORMULA_WALL_TILE_COUNT, is_flower
from mahjong_rules.tiles import parse_tile

from mahjong_table.core import evolve as kernel
from mahjong_table.core.events import (
    EXPOSURE_ADDED,
    NO_SEAT,
    BirdRevealed,
    ChowClaimed,
    ClaimPassed,
    FlowerReplaced,
    HandsDealt,
    KongDeclared,
    KongRobbed,
    PlayerLeft,
    PlayerWon,
    PongClaimed,
    TableOpened,
    TileDiscarded,
    TileDrawn,
)
from mahjong_table.core.state import (
    SEAT_COUNT,
    MeldState,
    Phase,
    add_count,
    hidden_from_all_but,
    pop_discard,
    replaced,
    with_player,
)
from mahjong_table.formula import hands
from mahjong_table.formula.state import (
    ASK_CHOW,
    ASK_KONG,
    ASK_PONG,
    ASK_WIN,
    Ask,
    FormulaPlayer,
    FormulaTableState,
    FormulaWindow,
)

DEALT_TILE_COUNT = 14 + 3 * 13


def _opened(event: TableOpened) -> FormulaTableState:
    assert len(event.wall) == FORMULA_WALL_TILE_COUNT
    wall = tuple(parse_tile(code) for code in event.wall)
    return FormulaTableState(
        table_id=event.table_id,
        room_id=event.room_id,
        rules=event.rules,
        dealer_seat=event.dealer_seat,
        wall=wall,
        wall_flowers_before=tuple(itertools.accumulate(map(is_flower, wall), initial=0)),
        players=kernel.seated(event, _new_player),
        wildcard_indicator=parse_tile(event.wildcard_indicator),
        wildcard=parse_tile(event.wildcard),
    )


def _new_player(player_id: str) -> FormulaPlayer:
    return FormulaPlayer(player_id=player_id)


def _start_play_if_ready(state: FormulaTableState) -> FormulaTableState:
    """RULES.md 2.1: once no hand holds a flower the dealer starts by discarding (14 tiles)."""
    if any(player.held_flowers() for player in state.players):
        return replaced(state, phase=Phase.DEALING)
    return replaced(state, phase=Phase.TURN, turn_seat=state.dealer_seat, drawn_tile=None)


def _dealt(state: FormulaTableState, event: HandsDealt) -> FormulaTableState:
    head = state.wall_tail - event.wall_remaining
    # RULES.md 2.1: after the deal the indicator is turned up (flowers turned before it are set aside).
    assert state.wall[head - 1] == state.wildcard_indicator, "the indicator is the last tile taken"
    turned = state.wall[DEALT_TILE_COUNT : head - 1]
    assert all(map(is_flower, turned))
    return _start_play_if_ready(
        replaced(
            state,
            players=kernel.dealt(state.players, event, parse_tile),
            wall_head=head,
            turned_flowers=turned,
        )
    )


def _flower_replaced(state: FormulaTableState, event: FlowerReplaced) -> FormulaTableState:
    flower = parse_tile(event.flower)
    assert is_flower(flower)
    player = state.players[event.seat]
    updated = replaced(
        player, concealed=add_count(player.concealed, flower, -1), flowers=(*player.flowers, flower)
    )
    return replaced(state, players=with_player(state.players, event.seat, updated))


def _tile_drawn(state: FormulaTableState, event: TileDrawn) -> FormulaTableState:
    tile = parse_tile(event.tile)
    head, tail = kernel.wall_after_draw(state, event, tile)
    player = state.players[event.seat]
    drawn = replaced(
        state,
        players=with_player(
            state.players, event.seat, replaced(player, concealed=add_count(player.concealed, tile, 1))
        ),
        wall_head=head,
        wall_tail=tail,
    )
    if state.phase is Phase.DEALING:
        return _start_play_if_ready(drawn)
    return replaced(
        drawn,
        phase=Phase.TURN,
        turn_seat=event.seat,
        drawn_tile=tile,
        turn_after_meld=False,
        # A kong's replacement (even after a flower on it) is 杠上开花 material; a flower's is not.
        turn_after_kong=state.turn_after_kong and event.from_tail,
        window=None,
    )


def open_window(state: FormulaTableState, tile: int, from_seat: int) -> FormulaWindow:
    """Who is asked about a discard, in priority order (RULES.md 2.1): every seat that can win, in
    turn order after the discarder (截和: the first to take it wins); then the seat that can pong
    or kong; then the next seat's chow. On the last discard only wins are asked."""
    order = [(from_seat + offset) % SEAT_COUNT for offset in range(1, SEAT_COUNT)]
    in_game = [seat for seat in order if state.players[seat].in_game]
    asks = [Ask(seat, (ASK_WIN,)) for seat in in_game if hands.discard_win(state, seat, tile) is not None]
    if state.non_flower_remaining() > 0:
        next_seat = order[0]
        chows = hands.chow_options(state, next_seat, tile) if next_seat in in_game else ()
        for seat in in_game:
            if hands.can_pong(state, seat, tile):
                kinds = [ASK_PONG]
                if hands.can_exposed_kong(state, seat, tile):
                    kinds.append(ASK_KONG)
                if seat == next_seat and chows:
                    kinds.append(ASK_CHOW)
                asks.append(Ask(seat, tuple(kinds), chows if seat == next_seat else ()))
        if chows and all(ask.seat != next_seat or ASK_WIN in ask.kinds for ask in asks):
            asks.append(Ask(next_seat, (ASK_CHOW,), chows))
    return FormulaWindow(tile, from_seat, tuple(asks))


def open_rob_window(state: FormulaTableState, tile: int, from_seat: int) -> FormulaWindow:
    """Who may rob the added kong of `tile` (抢杠和, RULES.md 2.2): every seat that can win on it,
    in turn order after the declarer (the first to take it wins, as 截和). Nothing else is asked."""
    order = [(from_seat + offset) % SEAT_COUNT for offset in range(1, SEAT_COUNT)]
    asks = tuple(
        Ask(seat, (ASK_WIN,))
        for seat in order
        if state.players[seat].in_game and hands.rob_kong_win(state, seat, tile) is not None
    )
    return FormulaWindow(tile, from_seat, asks, rob_kong=True)


def _tile_discarded(state: FormulaTableState, event: TileDiscarded) -> FormulaTableState:
    tile = parse_tile(event.tile)
    after = kernel.tile_discarded(state, event.seat, tile, turn_after_kong=False, turn_after_meld=False)
    return replaced(after, window=open_window(after, tile, event.seat))


def _claim_passed(state: FormulaTableState, event: ClaimPassed) -> FormulaTableState:
    window = state.window
    assert window is not None and window.current is not None and window.current.seat == event.seat
    return replaced(
        state,
        window=replaced(window, asks=window.asks[1:]),
        hidden_counts=hidden_from_all_but(state.hidden_counts, event.seat),
    )


def _meld_turn(
    state: FormulaTableState, seat: int, players: tuple[FormulaPlayer, ...], *, kong: bool
) -> FormulaTableState:
    return replaced(
        state,
        players=players,
        phase=Phase.TURN,
        turn_seat=seat,
        drawn_tile=None,
        turn_after_meld=not kong,
        turn_after_kong=kong,
        window=None,
    )


def _pong_claimed(state: FormulaTableState, event: PongClaimed) -> FormulaTableState:
    players = kernel.ponged(state.players, event, parse_tile(event.tile))
    return _meld_turn(state, event.seat, players, kong=False)


def _chow_claimed(state: FormulaTableState, event: ChowClaimed) -> FormulaTableState:
    start, claimed = parse_tile(event.tile), parse_tile(event.claimed_tile)
    assert start <= claimed <= start + 2
    players = pop_discard(state.players, event.from_seat, claimed)
    player = players[event.seat]
    concealed = player.concealed
    for tile in (start, start + 1, start + 2):
        if tile != claimed:
            concealed = add_count(concealed, tile, -1)
    chowed = replaced(
        player,
        concealed=concealed,
        melds=(*player.melds, MeldState("chow", start, "", event.from_seat)),
    )
    return _meld_turn(state, event.seat, with_player(players, event.seat, chowed), kong=False)


def _kong_declared(state: FormulaTableState, event: KongDeclared) -> FormulaTableState:
    tile = parse_tile(event.tile)
    after = _meld_turn(state, event.seat, kernel.konged(state.players, event, tile), kong=True)
    if event.exposure != EXPOSURE_ADDED:
        return after
    # 抢杠和 (RULES.md 2.2): the added tile is open to robbing before the replacement draw.
    return replaced(after, phase=Phase.CLAIM, window=open_rob_window(after, tile, event.seat))


def _kong_robbed(state: FormulaTableState, event: KongRobbed) -> FormulaTableState:
    """The robbed kong is void: the pong stays and the tile lies in the declarer's discards, from
    where the robbing `PlayerWon` takes it, as a discard win does."""
    tile = parse_tile(event.tile)
    window = state.window
    assert window is not None and window.rob_kong, "KongRobbed outside a rob window"
    assert (window.tile, window.from_seat) == (tile, event.kong_seat), "KongRobbed of another kong"
    return replaced(state, players=kernel.kong_robbed(state.players, event.kong_seat, tile))


def _player_won(state: FormulaTableState, event: PlayerWon) -> FormulaTableState:
    player = state.players[event.seat]
    assert player.in_game and state.win_count == 0, "a formula hand has one win (RULES.md 2.1)"
    won = replaced(player, won=True)
    if event.from_seat != NO_SEAT:
        # The winning discard joins the winner's hand for the reveal (tiles stay accounted for).
        players = pop_discard(state.players, event.from_seat, parse_tile(event.win_tile))
        won = replaced(won, concealed=add_count(won.concealed, parse_tile(event.win_tile), 1))
        state = replaced(state, players=players)
    return replaced(
        state,
        players=with_player(state.players, event.seat, won),
        win_count=1,
        winner_seat=event.seat,
        window=None,
        drawn_tile=None,
    )


def _bird_revealed(state: FormulaTableState, event: BirdRevealed) -> FormulaTableState:
    return replaced(state, bird_tile=parse_tile(event.tile), bird_seat=event.seat)


def _player_left(state: FormulaTableState, event: PlayerLeft) -> FormulaTableState:
    after = replaced(state, players=kernel.left(state.players, event.seat))
    window = after.window
    if window is not None:
        after = replaced(
            after, window=replaced(window, asks=tuple(a for a in window.asks if a.seat != event.seat))
        )
    return after


HANDLERS: dict[type[Any], Callable[[Any, Any], FormulaTableState]] = {
    HandsDealt: _dealt,
    FlowerReplaced: _flower_replaced,
    TileDrawn: _tile_drawn,
    TileDiscarded: _tile_discarded,
    ClaimPassed: _claim_passed,
    PongClaimed: _pong_claimed,
    ChowClaimed: _chow_claimed,
    KongDeclared: _kong_declared,
    KongRobbed: _kong_robbed,
    PlayerWon: _player_won,
    BirdRevealed: _bird_revealed,
    PlayerLeft: _player_left,
}
"""The formula events' folds but `TableOpened`'s and the kernel's (`core.evolve.make_fold`)."""


evolve, fold = kernel.make_fold("formula", _opened, HANDLERS)
"""`evolve(state, event)` folds one event into the state (`state` is None only before
`TableOpened`); `fold(events, state=None)` a stream of them."""
