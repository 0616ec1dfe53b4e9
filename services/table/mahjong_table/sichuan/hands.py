"""Rule questions about one seat's hand, shared by `evolve` (claim windows), `decide`, the views
and the automatic actions. Everything is a pure function of the state."""

from __future__ import annotations

from itertools import compress

from mahjong_table.core.events import (
    EXPOSURE_ADDED,
    EXPOSURE_CONCEALED,
    NO_SEAT,
    WIN_BY_DISCARD,
    WIN_BY_ROB_KONG,
    WIN_BY_SELF_DRAW,
)
from mahjong_table.core.state import SEAT_COUNT
from mahjong_table.sichuan import rules_adapter
from mahjong_table.sichuan.rules_adapter import WinEvaluation, WinSituation
from mahjong_table.sichuan.state import (
    TILE_KIND_COUNT,
    ClaimWindow,
    PlayerState,
    TableState,
    WindowKind,
    WindowStage,
)


def rules_melds(player: PlayerState) -> tuple[tuple[int, str], ...]:
    """The melds as the adapter takes them: (tile, kong exposure or "" for a pong), memoised on
    the player."""
    if not player.melds:
        return ()
    melds: tuple[tuple[int, str], ...] | None = player.derived.get("rules_melds")
    if melds is None:
        melds = tuple((meld.tile, meld.exposure if meld.kind == "kong" else "") for meld in player.melds)
        player.derived["rules_melds"] = melds
    return melds


def waits(player: PlayerState) -> frozenset[int]:
    """The tiles that would complete the player's hand of 13, memoised on the player (asked on
    every discard of the others and by every view) and by the hand itself."""
    found: frozenset[int] | None = player.derived.get("waits")
    if found is None:
        if player.holds_missing_suit():
            found = _NO_TILES  # never ready while holding the missing suit (RULES.md 1.3)
        else:
            found = rules_adapter.waiting_tiles(player.concealed, rules_melds(player), player.missing_suit)
        player.derived["waits"] = found
    return found


_NO_TILES: frozenset[int] = frozenset()


def claim_win_evaluation(
    state: TableState, seat: int, tile: int, kind: WindowKind, after_kong: bool
) -> WinEvaluation | None:
    """Evaluate a win of `seat` on another player's tile (a discard or a robbed added kong)."""
    player = state.players[seat]
    situation = WinSituation(
        win_by=WIN_BY_ROB_KONG if kind is WindowKind.ROB_KONG else WIN_BY_DISCARD,
        after_kong=after_kong and kind is WindowKind.DISCARD,
        is_dealer=seat == state.dealer_seat,
        self_draw_bonus=state.rules.self_draw_bonus,
        cap_points=state.rules.cap_points,
    )
    return rules_adapter.evaluate_win(
        player.concealed, rules_melds(player), tile, player.missing_suit, situation
    )


def win_offer_multiplier(state: TableState, seat: int, tile: int, kind: WindowKind, after_kong: bool) -> int:
    """The multiplier of the win `seat` may claim on `tile`, or 0 when no win is offered.

    The skip-win lock (RULES.md 1.4, option `skip_win_lock`) withholds a win that does not score
    more than the win the player passed since their last draw. It also applies to robbing a kong,
    which is a win on another player's tile like a discard.
    """
    player = state.players[seat]
    if tile not in waits(player):  # none while the hand holds its missing suit, none of that suit
        return 0
    evaluation = claim_win_evaluation(state, seat, tile, kind, after_kong)
    if evaluation is None:
        return 0
    if state.rules.skip_win_lock and 0 < player.skip_win_multiplier >= evaluation.multiplier:
        return 0
    return evaluation.multiplier


def open_window(
    state: TableState, kind: WindowKind, tile: int, from_seat: int, after_kong: bool
) -> ClaimWindow:
    """The claim window on `tile` (RULES.md 1.4, 1.5): first the players who can win are asked;
    if there are none, the meld stage (pong/kong, discards only) follows at once."""
    offers = _NO_OFFERS
    for seat, player in enumerate(state.players):
        if seat != from_seat and not player.won and not player.left and tile in waits(player):
            multiplier = win_offer_multiplier(state, seat, tile, kind, after_kong)
            if multiplier:
                offers = (*offers[:seat], multiplier, *offers[seat + 1 :])
    if offers is not _NO_OFFERS:
        pending = frozenset(seat for seat in range(SEAT_COUNT) if offers[seat])
        return ClaimWindow(kind, tile, from_seat, WindowStage.WIN, pending, offers, after_kong=after_kong)
    return _meld_window(state, kind, tile, from_seat, offers, after_kong, ())


_NO_OFFERS = (0,) * SEAT_COUNT


def meld_stage(state: TableState, window: ClaimWindow) -> ClaimWindow:
    """Move a window whose win stage is over without a winner to the pong/kong stage."""
    return _meld_window(
        state,
        window.kind,
        window.tile,
        window.from_seat,
        window.win_offers,
        window.after_kong,
        window.winners,
    )


def _meld_window(
    state: TableState,
    kind: WindowKind,
    tile: int,
    from_seat: int,
    offers: tuple[int, ...],
    after_kong: bool,
    winners: tuple[int, ...],
) -> ClaimWindow:
    """The meld stage of a window: the one seat that may pong or kong `tile`, or nobody."""
    seat = _meld_claimant(state, kind, tile, from_seat)
    if seat == NO_SEAT:
        return ClaimWindow(
            kind,
            tile,
            from_seat,
            WindowStage.MELD,
            _NO_SEATS,
            offers,
            after_kong=after_kong,
            winners=winners,
        )
    return ClaimWindow(
        kind,
        tile,
        from_seat,
        WindowStage.MELD,
        frozenset((seat,)),
        offers,
        meld_seat=seat,
        can_kong=state.players[seat].concealed[tile] >= 3,
        after_kong=after_kong,
        winners=winners,
    )


_NO_SEATS: frozenset[int] = frozenset()


def _meld_claimant(state: TableState, kind: WindowKind, tile: int, from_seat: int) -> int:
    """The seat holding two of `tile` that may pong it, or NO_SEAT.

    Only a discard can be ponged or konged (an added kong can only be robbed), and not when the
    wall is empty: the last discard may still be won on, but a meld would need a further turn
    that the exhausted wall does not have (RULES.md 1.4-1.6).
    """
    if kind is not WindowKind.DISCARD or state.wall_tail == state.wall_head:
        return NO_SEAT
    tile_suit = rules_adapter.suit_of(tile)
    for seat, player in enumerate(state.players):
        if (
            player.concealed[tile] >= 2
            and seat != from_seat
            and player.in_game
            and player.missing_suit != tile_suit
        ):
            return seat
    return NO_SEAT


def self_draw_situation(state: TableState, seat: int) -> WinSituation:
    """Situational facts of a self-draw by `seat` now (RULES.md 1.7 extras)."""
    player = state.players[seat]
    is_dealer = seat == state.dealer_seat
    if is_dealer:
        first_turn = player.draw_count == 0 and state.discard_count == 0 and not state.melds_in_game
    else:
        first_turn = player.draw_count == 1 and not state.melds_in_game and not state.turn_after_kong
    return WinSituation(
        win_by=WIN_BY_SELF_DRAW,
        after_kong=state.turn_after_kong,
        last_tile=state.wall_remaining == 0 and state.drawn_tile is not None,
        first_turn=first_turn,
        is_dealer=is_dealer,
        self_draw_bonus=state.rules.self_draw_bonus,
        cap_points=state.rules.cap_points,
    )


def self_draw_win(state: TableState, seat: int) -> tuple[int, WinEvaluation] | None:
    """The winning tile and evaluation of a self-draw win by the seat on turn, or None.

    The winning tile is the drawn tile; on the dealer's first turn (天胡, no draw) it is the held
    tile that gives the highest multiplier.
    """
    if state.turn_seat != seat or state.turn_after_meld:
        return None
    player = state.players[seat]
    if player.holds_missing_suit():
        return None
    melds = rules_melds(player)
    drawn = state.drawn_tile
    if drawn is not None:
        without_drawn = list(player.concealed)
        without_drawn[drawn] -= 1
        if drawn not in rules_adapter.waiting_tiles(tuple(without_drawn), melds, player.missing_suit):
            return None
    situation = self_draw_situation(state, seat)
    candidates = (
        [state.drawn_tile]
        if state.drawn_tile is not None
        else [tile for tile, count in enumerate(player.concealed) if count]
    )
    best: tuple[int, WinEvaluation] | None = None
    for tile in candidates:
        counts = list(player.concealed)
        counts[tile] -= 1
        evaluation = rules_adapter.evaluate_win(counts, melds, tile, player.missing_suit, situation)
        if evaluation is not None and (best is None or evaluation.multiplier > best[1].multiplier):
            best = (tile, evaluation)
    return best


def kong_options(state: TableState, seat: int) -> list[tuple[int, str]]:
    """Kongs the seat on turn may declare now: (tile, "concealed" | "added") (RULES.md 1.5).

    None after a pong (the claimant must discard), none when the wall is empty (no replacement),
    none of the missing suit (RULES.md 1.3).
    """
    if state.turn_seat != seat or state.turn_after_meld or state.wall_remaining == 0:
        return []
    player = state.players[seat]
    options: list[tuple[int, str]] = []
    if 4 in player.concealed:
        for tile, count in enumerate(player.concealed):
            if count == 4 and rules_adapter.suit_of(tile) != player.missing_suit:
                options.append((tile, EXPOSURE_CONCEALED))
    for meld in player.melds:
        if meld.kind == "pong" and player.concealed[meld.tile] >= 1:
            options.append((meld.tile, EXPOSURE_ADDED))
    return options


def allowed_discards(player: PlayerState) -> list[int]:
    """Tiles the player may discard: only missing-suit tiles while any is held (RULES.md 1.3)."""
    if player.holds_missing_suit():
        start = 9 * (player.missing_suit or 0)
        return list(compress(range(start, start + 9), player.concealed[start : start + 9]))
    return list(compress(range(TILE_KIND_COUNT), player.concealed))


def farthest_from(from_seat: int, seats: tuple[int, ...]) -> int:
    """The seat of `seats` farthest from `from_seat` in turn order (RULES.md 1.6 multi-win)."""
    assert seats, "no seats to choose from"
    return max(seats, key=lambda seat: (seat - from_seat) % SEAT_COUNT)


__all__ = [
    "NO_SEAT",
    "allowed_discards",
    "claim_win_evaluation",
    "farthest_from",
    "kong_options",
    "meld_stage",
    "open_window",
    "rules_melds",
    "self_draw_situation",
    "self_draw_win",
    "waits",
    "win_offer_multiplier",
]
