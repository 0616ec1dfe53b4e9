"""What one seat may see and do: `view_for(state, seat)`, `legal_actions(state, seat)` and
`redact(event, viewer_seat)` (ARCHITECTURE.md "Identity and hidden information").

A player never sees another's concealed tiles, the wall, others' exchange picks, others' missing
suits before all are declared, or who was asked about a discard (that would reveal a pair or a
win). `viewer_seat` None is a spectator without a seat: they see only public facts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mahjong_table.core.events import (
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
from mahjong_table.core.state import SEAT_COUNT, Phase, replaced
from mahjong_table.sichuan import hands
from mahjong_table.sichuan.decide import meld_event
from mahjong_table.sichuan.rules_adapter import SUIT_CODES, code_of
from mahjong_table.sichuan.state import TILE_KIND_COUNT, PlayerState, TableState, WindowStage

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


_LEAVE = LegalAction(ACTION_LEAVE)
_WIN = LegalAction(ACTION_WIN)
_PONG = LegalAction(ACTION_PONG)
_PASS = LegalAction(ACTION_PASS)
_DECLARE_MISSING_SUIT = LegalAction(ACTION_DECLARE_MISSING_SUIT, suits=SUIT_CODES)


def legal_actions(state: TableState, seat: int) -> tuple[LegalAction, ...]:
    """The commands `seat` may send now; empty when the table waits on nobody at this seat."""
    player = state.players[seat]
    if state.phase is Phase.ENDED or player.left:
        return ()
    if player.won:
        return (_LEAVE,)
    if state.phase is Phase.TURN:
        return (*_turn_actions(state, seat), _LEAVE) if state.turn_seat == seat else (_LEAVE,)
    if state.phase is Phase.CLAIM:
        window = state.window
        if window is None or seat not in window.pending:
            return (_LEAVE,)
        if window.stage is WindowStage.WIN:
            return (_WIN, _PASS, _LEAVE)
        if window.can_kong:
            return (_PONG, LegalAction(ACTION_KONG, (code_of(window.tile),)), _PASS, _LEAVE)
        return (_PONG, _PASS, _LEAVE)
    if state.phase is Phase.EXCHANGE and player.exchange_pick is None:
        return (_exchange_action(player), _LEAVE)
    if state.phase is Phase.MISSING_SUIT and player.missing_suit is None:
        return (_DECLARE_MISSING_SUIT, _LEAVE)
    return (_LEAVE,)


def _turn_actions(state: TableState, seat: int) -> list[LegalAction]:
    """Win (self-draw), kong and discard for the seat on turn."""
    actions: list[LegalAction] = []
    if hands.self_draw_win(state, seat) is not None:
        actions.append(_WIN)
    kongs = hands.kong_options(state, seat)
    if kongs:
        actions.append(LegalAction(ACTION_KONG, tuple([code_of(tile) for tile, _ in kongs])))
    discards = hands.allowed_discards(state.players[seat])
    actions.append(LegalAction(ACTION_DISCARD, tuple([code_of(tile) for tile in discards])))
    return actions


def _exchange_action(player: PlayerState) -> LegalAction:
    """Exchange three: the held tiles of the suits holding at least three (RULES.md 1.2)."""
    sizes = [sum(player.concealed[suit * 9 : suit * 9 + 9]) for suit in range(3)]
    suits = tuple(SUIT_CODES[suit] for suit in range(3) if sizes[suit] >= 3)
    tiles = tuple(
        code_of(tile)
        for tile in range(TILE_KIND_COUNT)
        for _ in range(player.concealed[tile])
        if sizes[tile // 9] >= 3
    )
    return LegalAction(ACTION_EXCHANGE_THREE, tiles, suits)


def _public_meld(meld: Meld, show_concealed_kongs: bool) -> Meld:
    """A concealed kong shows face down to the other seats until the game ends."""
    if meld.exposure == EXPOSURE_CONCEALED and not show_concealed_kongs:
        return replace(meld, tile="")
    return meld


def _waits(state: TableState, seat: int) -> tuple[str, ...]:
    player = state.players[seat]
    if player.won or player.left or state.phase in (Phase.DEALING, Phase.EXCHANGE):
        return ()
    if player.tile_count + 3 * len(player.melds) != 13:
        return ()
    return tuple(code_of(tile) for tile in sorted(hands.waits(player)))


def _seat_view(state: TableState, seat: int, viewer_seat: int) -> SeatView:
    """The public facts about `seat` as `viewer_seat` sees them, memoised on the seat's player
    (the other seats' players stay the same objects while one seat acts)."""
    player = state.players[seat]
    own = seat == viewer_seat
    show_missing_suit = state.missing_suits_public or own
    show_concealed_kongs = (
        not player.melds
        or own
        or state.is_over
        or all(meld.exposure != EXPOSURE_CONCEALED for meld in player.melds)
    )
    key = ("seat_view", seat, show_missing_suit, show_concealed_kongs)
    view: SeatView | None = player.derived.get(key)
    if view is None:
        view = SeatView(
            seat=seat,
            player_id=player.player_id,
            concealed_tile_count=player.tile_count,
            melds=tuple(_public_meld(meld_event(meld), show_concealed_kongs) for meld in player.melds),
            discards=tuple(code_of(tile) for tile in player.discards),
            missing_suit=(
                SUIT_CODES[player.missing_suit]
                if player.missing_suit is not None and show_missing_suit
                else ""
            ),
            exchange_picked=player.exchange_pick is not None,
            missing_suit_chosen=player.missing_suit is not None,
            won=player.won,
            left=player.left,
        )
        player.derived[key] = view
    return view


def _hand(player: PlayerState) -> tuple[str, ...]:
    """The player's concealed tiles as sorted codes, memoised on the player."""
    hand: tuple[str, ...] | None = player.derived.get("hand")
    if hand is None:
        hand = tuple(code_of(tile) for tile in range(TILE_KIND_COUNT) for _ in range(player.concealed[tile]))
        player.derived["hand"] = hand
    return hand


def view_for(state: TableState, seat: int) -> TableView:
    """The seat's view: own hand, every meld and discard, whose turn, phase, legal actions now,
    wall remaining and the tile the seat is asked about."""
    player = state.players[seat]
    window = state.window
    asked = window is not None and seat in window.pending
    own_turn = state.phase is Phase.TURN and state.turn_seat == seat
    swapped = state.phase not in (Phase.DEALING, Phase.EXCHANGE)
    return TableView(
        table_id=state.table_id,
        viewer_seat=seat,
        phase=state.phase.value,
        dealer_seat=state.dealer_seat,
        turn_seat=state.turn_seat,
        hand=_hand(player),
        drawn_tile=code_of(state.drawn_tile) if state.drawn_tile is not None and own_turn else "",
        exchange_pick=tuple(code_of(tile) for tile in player.exchange_pick or ()),
        exchange_direction=state.exchange_direction if swapped else "",
        seats=tuple(_seat_view(state, other, seat) for other in range(SEAT_COUNT)),
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
        return event if event.seat == viewer_seat else replaced(event, tile="")
    if isinstance(event, ExchangePicked):
        return event if event.seat == viewer_seat else replaced(event, tiles=())
    if isinstance(event, TilesExchanged):
        own = tuple(t for t in event.transfers if viewer_seat in (t.from_seat, t.to_seat))
        return replace(event, transfers=own)
    if isinstance(event, MissingSuitChosen):
        return event if event.seat == viewer_seat else replaced(event, suit="")
    if isinstance(event, KongDeclared):
        hidden = event.exposure == EXPOSURE_CONCEALED and event.seat != viewer_seat
        return replaced(event, tile="") if hidden else event
    if isinstance(event, ClaimPassed):
        return event if event.seat == viewer_seat else None
    if isinstance(event, TurnTimedOut) and event.phase == TIMEOUT_PHASE_CLAIM:
        return event if event.seat == viewer_seat else None
    return event
