"""What one seat may see and do, the part both families share (ARCHITECTURE.md "Identity and
hidden information"): the `TableView` a seat gets and its parts, the `LegalAction`s, the public
form of a seat (`seat_melds`) and `redact(event, viewer_seat)`.

A player never sees another's concealed tiles, the wall, others' exchange picks, others' missing
suits before all are declared, or who was asked about a discard (that would reveal a pair or a
win). `viewer_seat` None is a spectator without a seat: they see only public facts. The Formula
events (the wildcard in `TableOpened`, `FlowerReplaced`, `ChowClaimed`, `BirdRevealed`) are public
as they are (RULES.md 2.1, 2.3). The family views (`mahjong_table.sichuan.views`,
`mahjong_table.formula.views`) add the legal actions and the facts of their own rules.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

from mahjong_table.core.decide import meld_event
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
from mahjong_table.core.frozen import fast_init
from mahjong_table.core.state import MeldState, Phase, PlayerShape, TableShape, replaced
from mahjong_table.core.tiles import code_of, codes_of

ACTION_EXCHANGE_THREE = "exchange_three"
ACTION_DECLARE_MISSING_SUIT = "declare_missing_suit"
ACTION_DISCARD = "discard"
ACTION_PONG = "pong"
ACTION_CHOW = "chow"
ACTION_KONG = "kong"
ACTION_WIN = "win"
ACTION_PASS = "pass"
ACTION_LEAVE = "leave"


@fast_init
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


@fast_init
@dataclass(frozen=True, slots=True)
class SeatView:
    """The public facts about one seat."""

    seat: int
    player_id: str
    concealed_tile_count: int
    melds: tuple[Meld, ...]
    discards: tuple[str, ...]
    won: bool
    left: bool
    missing_suit: str = ""
    """Sichuan: "" until every seat declared (RULES.md 1.3), except for the viewer's own seat."""
    exchange_picked: bool = False
    missing_suit_chosen: bool = False
    flowers: tuple[str, ...] = ()
    """Formula: the flowers the seat has set aside (public, RULES.md 2.1)."""


@fast_init
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


LEAVE = LegalAction(ACTION_LEAVE)
WIN = LegalAction(ACTION_WIN)
PONG = LegalAction(ACTION_PONG)
PASS = LegalAction(ACTION_PASS)


def shows_concealed_kongs(state: TableShape, player: PlayerShape, seat: int, viewer_seat: int) -> bool:
    """Whether `viewer_seat` sees the tiles of `seat`'s concealed kongs: its own, or once the game
    is over (a concealed kong shows face down to the other seats until then)."""
    return (
        seat == viewer_seat
        or not player.melds
        or state.is_over
        or all(meld.exposure != EXPOSURE_CONCEALED for meld in player.melds)
    )


def seat_view(
    state: TableShape,
    seat: int,
    viewer_seat: int,
    *,
    shown: tuple[object, ...] = (),
    family_facts: Callable[[], dict[str, Any]] | None = None,
) -> SeatView:
    """The public facts about `seat` as `viewer_seat` sees them, memoised on the seat's player (the
    other seats' players stay the same objects while one seat acts). `shown` adds to the memo's
    key what else the family shows this viewer; `family_facts` gives the family's own fields."""
    player = state.players[seat]
    show_concealed_kongs = shows_concealed_kongs(state, player, seat, viewer_seat)
    key = ("seat_view", seat, show_concealed_kongs, *shown)
    view: SeatView | None = player.derived.get(key)
    if view is None:
        view = SeatView(
            seat=seat,
            player_id=player.player_id,
            concealed_tile_count=player.tile_count,
            melds=seat_melds(player, show_concealed_kongs),
            discards=codes_of(player.discards),
            won=player.won,
            left=player.left,
            **(family_facts() if family_facts is not None else {}),
        )
        player.derived[key] = view
    return view


def seat_melds(player: PlayerShape, show_concealed_kongs: bool) -> tuple[Meld, ...]:
    """The seat's melds as a viewer sees them (`shows_concealed_kongs`)."""
    return tuple([_public_meld(meld, show_concealed_kongs) for meld in player.melds])


@functools.lru_cache(maxsize=4_096)
def _public_meld(meld: MeldState, show_concealed_kongs: bool) -> Meld:
    """The meld's event form as a viewer sees it: a function of the two values alone, kept per
    value (a meld stays on the table for the rest of the game, in every view of every seat)."""
    public = meld_event(meld)
    if public.exposure == EXPOSURE_CONCEALED and not show_concealed_kongs:
        return replace(public, tile="")
    return public


def table_view(
    state: TableShape,
    seat: int,
    *,
    hand: tuple[str, ...],
    seats: tuple[SeatView, ...],
    legal_actions: tuple[LegalAction, ...],
    waits: tuple[str, ...],
    exchange_pick: tuple[str, ...] = (),
    exchange_direction: str = "",
    wildcard_indicator: str = "",
    wildcard: str = "",
    bird_tile: str = "",
    bird_seat: int = NO_SEAT,
) -> TableView:
    """The seat's view: what every family shows the same way (whose turn, the phase, the drawn
    tile on the seat's own turn, the tile it is asked about) around what the family passes."""
    window = state.window
    asked = window is not None and seat in window.pending
    own_turn = state.phase is Phase.TURN and state.turn_seat == seat
    return TableView(
        table_id=state.table_id,
        viewer_seat=seat,
        phase=state.phase.value,
        dealer_seat=state.dealer_seat,
        turn_seat=state.turn_seat,
        hand=hand,
        drawn_tile=code_of(state.drawn_tile) if state.drawn_tile is not None and own_turn else "",
        exchange_pick=exchange_pick,
        exchange_direction=exchange_direction,
        seats=seats,
        wall_remaining=state.wall_remaining,
        claimable_tile=code_of(window.tile) if asked and window is not None else "",
        claim_from_seat=window.from_seat if asked and window is not None else NO_SEAT,
        legal_actions=legal_actions,
        waits=waits,
        end_reason=state.end_reason,
        version=state.version,
        wildcard_indicator=wildcard_indicator,
        wildcard=wildcard,
        bird_tile=bird_tile,
        bird_seat=bird_seat,
    )


def _table_opened(event: TableOpened, viewer_seat: int | None) -> TableOpened:
    """The wall and the (not yet announced) exchange direction are nobody's to see."""
    return replace(event, wall=(), exchange_direction="")


def _hands_dealt(event: HandsDealt, viewer_seat: int | None) -> HandsDealt:
    """Only the viewer's own hand."""
    hands = tuple(hand if hand.seat == viewer_seat else replace(hand, tiles=()) for hand in event.hands)
    return replace(event, hands=hands)


def _tile_drawn(event: TileDrawn, viewer_seat: int | None) -> TileDrawn:
    """Another seat's draw without its tile."""
    return event if event.seat == viewer_seat else replaced(event, tile="")


def _exchange_picked(event: ExchangePicked, viewer_seat: int | None) -> ExchangePicked:
    """Another seat's exchange pick without its tiles."""
    return event if event.seat == viewer_seat else replaced(event, tiles=())


def _tiles_exchanged(event: TilesExchanged, viewer_seat: int | None) -> TilesExchanged:
    """Only the transfers the viewer gave or received."""
    own = tuple(t for t in event.transfers if viewer_seat in (t.from_seat, t.to_seat))
    return replace(event, transfers=own)


def _missing_suit_chosen(event: MissingSuitChosen, viewer_seat: int | None) -> MissingSuitChosen:
    """Another seat's missing-suit choice without the suit (public once all are declared)."""
    return event if event.seat == viewer_seat else replaced(event, suit="")


def _kong_declared(event: KongDeclared, viewer_seat: int | None) -> KongDeclared:
    """Another seat's concealed kong without its tile."""
    hidden = event.exposure == EXPOSURE_CONCEALED and event.seat != viewer_seat
    return replaced(event, tile="") if hidden else event


def _claim_passed(event: ClaimPassed, viewer_seat: int | None) -> ClaimPassed | None:
    """Dropped for the other seats: it would reveal that the seat could win or pong."""
    return event if event.seat == viewer_seat else None


def _turn_timed_out(event: TurnTimedOut, viewer_seat: int | None) -> TurnTimedOut | None:
    """A claim timeout is dropped for the other seats, as the pass it causes."""
    if event.phase == TIMEOUT_PHASE_CLAIM and event.seat != viewer_seat:
        return None
    return event


REDACTIONS: dict[type[Any], Callable[[Any, int | None], Any]] = {
    TableOpened: _table_opened,
    HandsDealt: _hands_dealt,
    TileDrawn: _tile_drawn,
    ExchangePicked: _exchange_picked,
    TilesExchanged: _tiles_exchanged,
    MissingSuitChosen: _missing_suit_chosen,
    KongDeclared: _kong_declared,
    ClaimPassed: _claim_passed,
    TurnTimedOut: _turn_timed_out,
}
"""The redaction of each event type a seat may not see whole: exactly the event types the event
registry declares `redacted` (`mahjong_platform.events`, checked by tests/test_event_registry.py);
every other event is public as it is."""


def redact(event: TableEvent, viewer_seat: int | None) -> TableEvent | None:
    """The event as `viewer_seat` may see it, or None when the viewer must not learn it happened
    (`REDACTIONS`; a public event is returned as it is)."""
    redaction = REDACTIONS.get(type(event))
    return event if redaction is None else cast(TableEvent | None, redaction(event, viewer_seat))
