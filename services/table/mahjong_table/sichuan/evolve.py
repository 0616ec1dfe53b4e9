"""`evolve(state, event) -> state`: the only way table state comes to be (RULES.md 1.1-1.6, 1.10).

Events are facts, so `evolve` never rejects one; it asserts invariants instead (a broken invariant
is a bug in `decide`, not an input error). Claim windows are derived here from the rules, so the
stream needs no hidden "who may claim" field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from mahjong_rules.wall import WALL_TILE_COUNT

from mahjong_table.core.events import (
    DIRECTION_CLOCKWISE,
    DIRECTION_COUNTER_CLOCKWISE,
    DIRECTION_OPPOSITE,
    EXPOSURE_ADDED,
    EXPOSURE_CONCEALED,
    EXPOSURE_EXPOSED,
    NO_SEAT,
    TIMEOUT_PHASE_CLAIM,
    WIN_BY_SELF_DRAW,
    ClaimPassed,
    ExchangePicked,
    GameEnded,
    HandsDealt,
    KongDeclared,
    KongRobbed,
    MissingSuitChosen,
    MissingSuitsDeclared,
    PlayerLeft,
    PlayerWon,
    PongClaimed,
    TableEvent,
    TableOpened,
    TileDiscarded,
    TileDrawn,
    TilesExchanged,
    TurnTimedOut,
    WallExhausted,
)
from mahjong_table.core.state import (
    SEAT_COUNT,
    MeldState,
    Phase,
    add_count,
    added_kong_to_pong,
    hidden_from_all_but,
    pong_to_added_kong,
    replaced,
    stamped,
    with_player,
)
from mahjong_table.sichuan import hands
from mahjong_table.sichuan.rules_adapter import SUIT_CODES, parse_code
from mahjong_table.sichuan.state import PlayerState, TableState, WindowKind, WindowStage

EXCHANGE_OFFSETS = {DIRECTION_CLOCKWISE: -1, DIRECTION_COUNTER_CLOCKWISE: 1, DIRECTION_OPPOSITE: 2}
"""RULES.md 1.2: clockwise gives to seat-1, counter-clockwise to seat+1, opposite to seat+2."""


def exchange_receiver(from_seat: int, direction: str) -> int:
    """The seat that receives `from_seat`'s three tiles in `direction`."""
    return (from_seat + EXCHANGE_OFFSETS[direction]) % SEAT_COUNT


def _pop_discard(state: TableState, seat: int, tile: int) -> tuple[PlayerState, ...]:
    """Take the last discard of `seat` (claimed or robbed back) off the discard pile."""
    player = state.players[seat]
    assert player.discards and player.discards[-1] == tile, "claimed tile is not the last discard"
    return with_player(state.players, seat, replaced(player, discards=player.discards[:-1]))


def _opened(state: TableState | None, event: TableOpened) -> TableState:
    assert state is None, "TableOpened must be the first event"
    assert len(event.wall) == WALL_TILE_COUNT and len(event.seats) == SEAT_COUNT
    seats = sorted(event.seats, key=lambda seat: seat.seat)
    return TableState(
        table_id=event.table_id,
        room_id=event.room_id,
        rules=event.rules,
        dealer_seat=event.dealer_seat,
        exchange_direction=event.exchange_direction,
        wall=tuple(parse_code(code) for code in event.wall),
        players=tuple(PlayerState(player_id=seat.player_id) for seat in seats),
        dice_roller_seat=event.dice_roller_seat,
        die_1=event.die_1,
        die_2=event.die_2,
    )


def _dealt(state: TableState, event: HandsDealt) -> TableState:
    players = list(state.players)
    for hand in event.hands:
        counts = list(players[hand.seat].concealed)
        for code in hand.tiles:
            counts[parse_code(code)] += 1
        players[hand.seat] = replaced(players[hand.seat], concealed=tuple(counts))
    phase = Phase.EXCHANGE if state.rules.exchange_three and state.exchange_direction else Phase.MISSING_SUIT
    return replaced(
        state, players=tuple(players), wall_head=state.wall_tail - event.wall_remaining, phase=phase
    )


def _exchange_picked(state: TableState, event: ExchangePicked) -> TableState:
    player = state.players[event.seat]
    assert player.exchange_pick is None
    pick = tuple(parse_code(code) for code in event.tiles)
    return replaced(
        state, players=with_player(state.players, event.seat, replaced(player, exchange_pick=pick))
    )


def _tiles_exchanged(state: TableState, event: TilesExchanged) -> TableState:
    held = [player.concealed for player in state.players]
    for transfer in event.transfers:
        for code in transfer.tiles:
            tile = parse_code(code)
            held[transfer.from_seat] = add_count(held[transfer.from_seat], tile, -1)
            held[transfer.to_seat] = add_count(held[transfer.to_seat], tile, 1)
    players = tuple(replaced(player, concealed=held[seat]) for seat, player in enumerate(state.players))
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
    if event.from_tail:
        assert state.wall[state.wall_tail - 1] == tile, "tail draw does not match the wall"
        head, tail = state.wall_head, state.wall_tail - 1
    else:
        assert state.wall[state.wall_head] == tile, "head draw does not match the wall"
        head, tail = state.wall_head + 1, state.wall_tail
    assert tail - head == event.wall_remaining
    player = state.players[event.seat]
    drawn = replaced(
        player,
        concealed=add_count(player.concealed, tile, 1),
        draw_count=player.draw_count + 1,
        skip_win_multiplier=0,  # RULES.md 1.4: the skip-win lock lasts until the player's own next draw
    )
    return replaced(
        state,
        players=with_player(state.players, event.seat, drawn),
        wall_head=head,
        wall_tail=tail,
        phase=Phase.TURN,
        turn_seat=event.seat,
        drawn_tile=tile,
        turn_after_pong=False,
        turn_after_kong=event.from_tail,
        window=None,
    )


def _tile_discarded(state: TableState, event: TileDiscarded) -> TableState:
    tile = parse_code(event.tile)
    player = state.players[event.seat]
    discarded = replaced(
        player, concealed=add_count(player.concealed, tile, -1), discards=(*player.discards, tile)
    )
    after = replaced(
        state,
        players=with_player(state.players, event.seat, discarded),
        phase=Phase.CLAIM,
        drawn_tile=None,
        discard_count=state.discard_count + 1,
    )
    window = hands.open_window(after, WindowKind.DISCARD, tile, event.seat, state.turn_after_kong)
    return stamped(after, window=window, turn_after_kong=False, turn_after_pong=False)


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
    tile = parse_code(event.tile)
    players = _pop_discard(state, event.from_seat, tile)
    player = players[event.seat]
    ponged = replaced(
        player,
        concealed=add_count(player.concealed, tile, -2),
        melds=(*player.melds, MeldState("pong", tile, "", event.from_seat)),
    )
    return replaced(
        state,
        players=with_player(players, event.seat, ponged),
        phase=Phase.TURN,
        turn_seat=event.seat,
        drawn_tile=None,
        turn_after_pong=True,
        turn_after_kong=False,
        window=None,
        melds_in_game=True,
    )


def _kong_declared(state: TableState, event: KongDeclared) -> TableState:
    tile = parse_code(event.tile)
    if event.exposure == EXPOSURE_EXPOSED:
        players = _pop_discard(state, event.from_seat, tile)
        player = players[event.seat]
        konged = replaced(
            player,
            concealed=add_count(player.concealed, tile, -3),
            melds=(*player.melds, MeldState("kong", tile, EXPOSURE_EXPOSED, event.from_seat)),
        )
        state = replaced(state, players=players)
    elif event.exposure == EXPOSURE_CONCEALED:
        player = state.players[event.seat]
        konged = replaced(
            player,
            concealed=add_count(player.concealed, tile, -4),
            melds=(*player.melds, MeldState("kong", tile, EXPOSURE_CONCEALED)),
        )
    else:
        assert event.exposure == EXPOSURE_ADDED
        player = state.players[event.seat]
        melds = pong_to_added_kong(player.melds, tile)
        konged = replaced(player, concealed=add_count(player.concealed, tile, -1), melds=melds)
    after = replaced(
        state,
        players=with_player(state.players, event.seat, konged),
        phase=Phase.TURN,
        turn_seat=event.seat,
        drawn_tile=None,
        turn_after_pong=False,
        window=None,
        melds_in_game=True,
    )
    if event.exposure != EXPOSURE_ADDED:
        return after
    # RULES.md 1.5: the added tile is open to robbing (wins only) before the replacement draw.
    window = hands.open_window(after, WindowKind.ROB_KONG, tile, event.seat, False)
    return stamped(after, phase=Phase.CLAIM, window=window)


def _kong_robbed(state: TableState, event: KongRobbed) -> TableState:
    tile = parse_code(event.tile)
    player = state.players[event.kong_seat]
    # The kong is void: the pong stays and the robbed tile lies in the declarer's discards.
    robbed = replaced(player, melds=added_kong_to_pong(player.melds, tile), discards=(*player.discards, tile))
    return replaced(state, players=with_player(state.players, event.kong_seat, robbed))


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
    player = state.players[event.seat]
    assert not player.left
    after = replaced(state, players=with_player(state.players, event.seat, replaced(player, left=True)))
    window = after.window
    if window is not None and event.seat in window.pending:
        after = _after_answer(replaced(after, window=replaced(window, pending=window.pending - {event.seat})))
    return after


def _turn_timed_out(state: TableState, event: TurnTimedOut) -> TableState:
    if event.phase == TIMEOUT_PHASE_CLAIM:  # hidden from the other seats, as the pass it causes
        return replaced(state, hidden_counts=hidden_from_all_but(state.hidden_counts, event.seat))
    return state


def _wall_exhausted(state: TableState, event: WallExhausted) -> TableState:
    assert state.wall_remaining == 0
    return replaced(state, wall_exhausted=True)


def _game_ended(state: TableState, event: GameEnded) -> TableState:
    return replaced(state, phase=Phase.ENDED, end_reason=event.reason, window=None, turn_seat=NO_SEAT)


_HANDLERS: dict[type[Any], Callable[[Any, Any], TableState]] = {
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
    TurnTimedOut: _turn_timed_out,
    WallExhausted: _wall_exhausted,
    GameEnded: _game_ended,
}


def evolve(state: TableState | None, event: TableEvent) -> TableState:
    """Fold one event into the state. `state` is None only before `TableOpened`."""
    handler = _HANDLERS.get(type(event))
    if handler is None:
        assert isinstance(event, TableOpened), f"{type(event).__name__} is not a Sichuan table event"
        return replaced(_opened(state, event), version=1)
    assert state is not None, f"{type(event).__name__} before TableOpened"
    assert state.phase is not Phase.ENDED, f"{type(event).__name__} after GameEnded"
    after = handler(state, event)
    if after is state:
        return replaced(state, version=state.version + 1)
    # `after` is a fresh value no one else holds yet: stamp its version in place.
    object.__setattr__(after, "version", state.version + 1)
    return after


def fold(events: Iterable[TableEvent], state: TableState | None = None) -> TableState:
    """Fold a stream of events (from the first, or onto `state`) into the table state."""
    for event in events:
        state = evolve(state, event)
    assert state is not None, "no events to fold"
    return state
