"""What one seat may see and do: `view_for(state, seat)`, `legal_actions(state, seat)` and
`redact(event, viewer_seat)` (ARCHITECTURE.md "Identity and hidden information").

A player never sees another's concealed tiles, the wall, others' exchange picks, others' missing
suits before all are declared, or who was asked about a discard (that would reveal a pair or a
win). `viewer_seat` None is a spectator without a seat: they see only public facts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mahjong_table.domain import hand_checks, rules_adapter
from mahjong_table.domain.decide import meld_event
from mahjong_table.domain.events import (
    EXPOSURE_CONCEALED,
    NO_SEAT,
    TIMEOUT_PHASE_CLAIM,
    ClaimPassed,
    ExchangePicked,
    HandsDealt,
    KongDeclared,
    Meld,
    MissingSuitChosen,
    TableEvent,
    TableOpened,
    TileDrawn,
    TilesExchanged,
    TurnTimedOut,
)
from mahjong_table.domain.rules_adapter import SUIT_CODES, code_of
from mahjong_table.domain.state import TILE_KIND_COUNT, Phase, TableState, WindowStage

ACTION_EXCHANGE_THREE = "exchange_three"
ACTION_DECLARE_MISSING_SUIT = "declare_missing_suit"
ACTION_DISCARD = "discard"
ACTION_PONG = "pong"
ACTION_CHOW = "chow"
ACTION_KONG = "kong"
ACTION_WIN = "win"
ACTION_PASS = "pass"
ACTION_LEAVE = "leave"


@dataclass(frozen=True, slots=True)
class LegalAction:
    """One kind of command the seat may send now, with its allowed tiles or suits.

    exchange_three: `tiles` are the held tiles of suits holding at least three (pick three of
    one suit); declare_missing_suit: `suits`; discard: the allowed tiles (missing suit first,
    RULES.md 1.3); kong: the kong tiles; pong, win, pass, leave: no arguments.
    """

    kind: str
    tiles: tuple[str, ...] = ()
    suits: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SeatView:
    """The public facts about one seat."""

    seat: int
    player_id: str
    concealed_tile_count: int
    melds: tuple[Meld, ...]
    discards: tuple[str, ...]
    missing_suit: str
    """"" until every seat declared (RULES.md 1.3), except for the viewer's own seat."""
    exchange_picked: bool
    missing_suit_chosen: bool
    won: bool
    left: bool
    flowers: tuple[str, ...] = ()
    """Formula: the flowers the seat has set aside (public, RULES.md 2.1)."""


@dataclass(frozen=True, slots=True)
class TableView:
    """One seat's view of the table now (what `GetView` returns)."""

    table_id: str
    viewer_seat: int
    phase: str
    dealer_seat: int
    turn_seat: int
    hand: tuple[str, ...]
    """The viewer's concealed tiles, sorted."""
    drawn_tile: str
    exchange_pick: tuple[str, ...]
    exchange_direction: str
    """"" until the swap happened (the direction is announced by `TilesExchanged`)."""
    seats: tuple[SeatView, ...]
    wall_remaining: int
    claimable_tile: str
    """The tile the viewer is asked about now (a discard or an added kong), else ""."""
    claim_from_seat: int
    legal_actions: tuple[LegalAction, ...]
    waits: tuple[str, ...]
    """Hint: the tiles that would complete the viewer's hand when it has no extra tile (RULES.md 1.7)."""
    end_reason: str
    version: int
    wildcard_indicator: str = ""
    """Formula: the wildcard indicator and the wildcard, visible to all (RULES.md 2.1)."""
    wildcard: str = ""
    bird_tile: str = ""
    """Formula: the bird and the seat it landed on, once revealed (RULES.md 2.3)."""
    bird_seat: int = NO_SEAT


def legal_actions(state: TableState, seat: int) -> tuple[LegalAction, ...]:
    """The commands `seat` may send now; empty when the table waits on nobody at this seat."""
    if state.is_over:
        return ()
    player = state.players[seat]
    if player.left:
        return ()
    leave = LegalAction(ACTION_LEAVE)
    if player.won:
        return (leave,)
    actions: list[LegalAction] = []
    if state.phase is Phase.EXCHANGE and player.exchange_pick is None:
        sizes = [sum(player.concealed[suit * 9 : suit * 9 + 9]) for suit in range(3)]
        suits = tuple(SUIT_CODES[suit] for suit in range(3) if sizes[suit] >= 3)
        tiles = tuple(
            code_of(tile)
            for tile in range(TILE_KIND_COUNT)
            for _ in range(player.concealed[tile])
            if sizes[tile // 9] >= 3
        )
        actions.append(LegalAction(ACTION_EXCHANGE_THREE, tiles, suits))
    elif state.phase is Phase.MISSING_SUIT and player.missing_suit is None:
        actions.append(LegalAction(ACTION_DECLARE_MISSING_SUIT, suits=SUIT_CODES))
    elif state.phase is Phase.TURN and state.turn_seat == seat:
        if hand_checks.self_draw_win(state, seat) is not None:
            actions.append(LegalAction(ACTION_WIN))
        kongs = hand_checks.kong_options(state, seat)
        if kongs:
            actions.append(LegalAction(ACTION_KONG, tuple(code_of(tile) for tile, _ in kongs)))
        actions.append(
            LegalAction(ACTION_DISCARD, tuple(code_of(t) for t in hand_checks.allowed_discards(player)))
        )
    elif state.phase is Phase.CLAIM and state.window is not None and seat in state.window.pending:
        window = state.window
        if window.stage is WindowStage.WIN:
            actions.append(LegalAction(ACTION_WIN))
        else:
            actions.append(LegalAction(ACTION_PONG))
            if window.can_kong:
                actions.append(LegalAction(ACTION_KONG, (code_of(window.tile),)))
        actions.append(LegalAction(ACTION_PASS))
    actions.append(leave)
    return tuple(actions)


def _public_meld(meld: Meld, owner: int, viewer_seat: int | None, game_over: bool) -> Meld:
    """A concealed kong shows face down to the other seats until the game ends."""
    if meld.exposure == EXPOSURE_CONCEALED and owner != viewer_seat and not game_over:
        return replace(meld, tile="")
    return meld


def _waits(state: TableState, seat: int) -> tuple[str, ...]:
    player = state.players[seat]
    if player.won or player.left or state.phase in (Phase.DEALING, Phase.EXCHANGE):
        return ()
    if player.tile_count + 3 * len(player.melds) != 13:
        return ()
    tiles = rules_adapter.waiting_tiles(
        player.concealed, hand_checks.rules_melds(player), player.missing_suit
    )
    return tuple(code_of(tile) for tile in sorted(tiles))


def view_for(state: TableState, seat: int) -> TableView:
    """The seat's view: own hand, every meld and discard, whose turn, phase, legal actions now,
    wall remaining and the tile the seat is asked about."""
    player = state.players[seat]
    window = state.window
    asked = window is not None and seat in window.pending
    seats = tuple(
        SeatView(
            seat=other,
            player_id=other_player.player_id,
            concealed_tile_count=other_player.tile_count,
            melds=tuple(
                _public_meld(meld_event(meld), other, seat, state.is_over) for meld in other_player.melds
            ),
            discards=tuple(code_of(tile) for tile in other_player.discards),
            missing_suit=(
                SUIT_CODES[other_player.missing_suit]
                if other_player.missing_suit is not None and (state.missing_suits_public or other == seat)
                else ""
            ),
            exchange_picked=other_player.exchange_pick is not None,
            missing_suit_chosen=other_player.missing_suit is not None,
            won=other_player.won,
            left=other_player.left,
        )
        for other, other_player in enumerate(state.players)
    )
    own_turn = state.phase is Phase.TURN and state.turn_seat == seat
    swapped = state.phase not in (Phase.DEALING, Phase.EXCHANGE)
    return TableView(
        table_id=state.table_id,
        viewer_seat=seat,
        phase=state.phase.value,
        dealer_seat=state.dealer_seat,
        turn_seat=state.turn_seat,
        hand=tuple(code_of(tile) for tile in range(TILE_KIND_COUNT) for _ in range(player.concealed[tile])),
        drawn_tile=code_of(state.drawn_tile) if state.drawn_tile is not None and own_turn else "",
        exchange_pick=tuple(code_of(tile) for tile in player.exchange_pick or ()),
        exchange_direction=state.exchange_direction if swapped else "",
        seats=seats,
        wall_remaining=state.wall_remaining,
        claimable_tile=code_of(window.tile) if asked and window is not None else "",
        claim_from_seat=window.from_seat if asked and window is not None else NO_SEAT,
        legal_actions=legal_actions(state, seat),
        waits=_waits(state, seat),
        end_reason=state.end_reason,
        version=state.version,
    )


def redact(event: TableEvent, viewer_seat: int | None) -> TableEvent | None:
    """The event as `viewer_seat` may see it, or None when the viewer must not learn it happened.

    TableOpened loses the wall and the (not yet announced) exchange direction; HandsDealt keeps
    only the viewer's hand; others' draws lose the tile, others' exchange picks their tiles, others'
    missing-suit choices the suit, others' concealed kongs the tile; TilesExchanged keeps only the
    viewer's transfers; others' claim passes and claim timeouts are dropped (they would reveal that
    the player could win or pong).
    """
    if isinstance(event, TableOpened):
        return replace(event, wall=(), exchange_direction="")
    if isinstance(event, HandsDealt):
        return replace(
            event,
            hands=tuple(
                hand if hand.seat == viewer_seat else replace(hand, tiles=()) for hand in event.hands
            ),
        )
    if isinstance(event, TileDrawn):
        return event if event.seat == viewer_seat else replace(event, tile="")
    if isinstance(event, ExchangePicked):
        return event if event.seat == viewer_seat else replace(event, tiles=())
    if isinstance(event, TilesExchanged):
        own = tuple(t for t in event.transfers if viewer_seat in (t.from_seat, t.to_seat))
        return replace(event, transfers=own)
    if isinstance(event, MissingSuitChosen):
        return event if event.seat == viewer_seat else replace(event, suit="")
    if isinstance(event, KongDeclared):
        hidden = event.exposure == EXPOSURE_CONCEALED and event.seat != viewer_seat
        return replace(event, tile="") if hidden else event
    if isinstance(event, ClaimPassed):
        return event if event.seat == viewer_seat else None
    if isinstance(event, TurnTimedOut) and event.phase == TIMEOUT_PHASE_CLAIM:
        return event if event.seat == viewer_seat else None
    return event
