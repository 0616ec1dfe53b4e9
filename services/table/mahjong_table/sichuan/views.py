"""What one seat may see and do at a Sichuan Bloody table: `view_for(state, seat)` and
`legal_actions(state, seat)`, on the kernel's `TableView` (`mahjong_table.core.views`, which also
redacts the events for both families).

Beyond the kernel's rules a seat sees its own exchange pick, the exchange direction once the swap
happened, and the other seats' missing suits only once all four are declared (RULES.md 1.2, 1.3).
"""

from __future__ import annotations

from mahjong_table.core.state import SEAT_COUNT, Phase
from mahjong_table.core.tiles import codes_of_counts
from mahjong_table.core.views import (
    ACTION_DECLARE_MISSING_SUIT,
    ACTION_DISCARD,
    ACTION_EXCHANGE_THREE,
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
from mahjong_table.sichuan import hands
from mahjong_table.sichuan.rules_adapter import SUIT_CODES, code_of
from mahjong_table.sichuan.state import TILE_KIND_COUNT, PlayerState, TableState, WindowStage

_DECLARE_MISSING_SUIT = LegalAction(ACTION_DECLARE_MISSING_SUIT, suits=SUIT_CODES)


def legal_actions(state: TableState, seat: int) -> tuple[LegalAction, ...]:
    """The commands `seat` may send now; empty when the table waits on nobody at this seat.

    The last answer is kept (`_last_legal_actions`): a feed asks whether its seat decides
    (`wire.decides`) and then builds the seat's view of the same state, which asks again."""
    global _last_legal_actions
    last = _last_legal_actions
    if last[0] is state and last[1] == seat:
        return last[2]
    actions = _legal_actions(state, seat)
    _last_legal_actions = (state, seat, actions)  # one tuple: read whole by any thread
    return actions


_last_legal_actions: tuple[object, int, tuple[LegalAction, ...]] = (None, -1, ())


def _legal_actions(state: TableState, seat: int) -> tuple[LegalAction, ...]:
    player = state.players[seat]
    if state.phase is Phase.ENDED or player.left:
        return ()
    if player.won:
        return (LEAVE,)
    if state.phase is Phase.TURN:
        return (*_turn_actions(state, seat), LEAVE) if state.turn_seat == seat else (LEAVE,)
    if state.phase is Phase.CLAIM:
        window = state.window
        if window is None or seat not in window.pending:
            return (LEAVE,)
        if window.stage is WindowStage.WIN:
            return (WIN, PASS, LEAVE)
        if window.can_kong:
            return (PONG, LegalAction(ACTION_KONG, (code_of(window.tile),)), PASS, LEAVE)
        return (PONG, PASS, LEAVE)
    if state.phase is Phase.EXCHANGE and player.exchange_pick is None:
        return (_exchange_action(player), LEAVE)
    if state.phase is Phase.MISSING_SUIT and player.missing_suit is None:
        return (_DECLARE_MISSING_SUIT, LEAVE)
    return (LEAVE,)


def _turn_actions(state: TableState, seat: int) -> list[LegalAction]:
    """Win (self-draw), kong and discard for the seat on turn."""
    actions: list[LegalAction] = []
    if hands.self_draw_win(state, seat) is not None:
        actions.append(WIN)
    kongs = hands.kong_options(state, seat)
    if kongs:
        actions.append(LegalAction(ACTION_KONG, tuple([code_of(tile) for tile, _ in kongs])))
    discards = hands.allowed_discards(state.players[seat])
    actions.append(LegalAction(ACTION_DISCARD, tuple([_CODES[tile] for tile in discards])))
    return actions


_CODES = tuple(code_of(tile) for tile in range(TILE_KIND_COUNT))


def _exchange_action(player: PlayerState) -> LegalAction:
    """Exchange three: the held tiles of the suits holding at least three (RULES.md 1.2)."""
    sizes = [sum(player.concealed[suit * 9 : suit * 9 + 9]) for suit in range(3)]
    suits = tuple(SUIT_CODES[suit] for suit in range(3) if sizes[suit] >= 3)
    tiles = codes_of_counts(
        [count if sizes[tile // 9] >= 3 else 0 for tile, count in enumerate(player.concealed)]
    )
    return LegalAction(ACTION_EXCHANGE_THREE, tiles, suits)


def _waits(state: TableState, seat: int) -> tuple[str, ...]:
    player = state.players[seat]
    if player.won or player.left or state.phase in (Phase.DEALING, Phase.EXCHANGE):
        return ()
    if player.tile_count + 3 * len(player.melds) != 13:
        return ()
    codes: tuple[str, ...] | None = player.derived.get("wait_codes")
    if codes is None:
        codes = tuple([code_of(tile) for tile in sorted(hands.waits(player))])
        player.derived["wait_codes"] = codes
    return codes


def _seat_view(state: TableState, seat: int, viewer_seat: int) -> SeatView:
    """The public facts about `seat` as `viewer_seat` sees them: its missing suit only to itself
    until all four are declared (RULES.md 1.3)."""
    player = state.players[seat]
    show_missing_suit = state.missing_suits_public or seat == viewer_seat

    def sichuan_facts() -> dict[str, object]:
        missing = player.missing_suit
        return {
            "missing_suit": SUIT_CODES[missing] if missing is not None and show_missing_suit else "",
            "exchange_picked": player.exchange_pick is not None,
            "missing_suit_chosen": missing is not None,
        }

    return seat_view(state, seat, viewer_seat, shown=(show_missing_suit,), family_facts=sichuan_facts)


_SEAT_VIEW_KEYS = tuple(
    tuple(tuple(("seat_view", seat, kongs, suit) for suit in (False, True)) for kongs in (False, True))
    for seat in range(SEAT_COUNT)
)
"""The memo keys `seat_view` files a seat's view under (`_SEAT_VIEW_KEYS[seat][kongs][suit]`: the
concealed kongs' tiles shown, the missing suit shown), made once."""


def _seat_views(state: TableState, viewer_seat: int) -> tuple[SeatView, ...]:
    """`_seat_view` of every seat for `viewer_seat`: each memoised view found on its player under
    the key `seat_view` files it under, without building the family's facts to look it up (the
    other seats' players stay the same objects while one seat acts, so most are found)."""
    players = state.players
    suit_public = state.missing_suits_public
    over = state.phase is Phase.ENDED
    views = []
    for seat in range(SEAT_COUNT):
        player = players[seat]
        own = seat == viewer_seat
        # `shows_concealed_kongs`, asked only of a seat with melds that the viewer may not see
        # whole by its cheaper tests (its own, the game over, no melds: shown).
        kongs = own or over or not player.melds or shows_concealed_kongs(state, player, seat, viewer_seat)
        key = _SEAT_VIEW_KEYS[seat][kongs][suit_public or own]
        view: SeatView | None = player.derived.get(key)
        views.append(_seat_view(state, seat, viewer_seat) if view is None else view)
    return tuple(views)


def _hand(player: PlayerState) -> tuple[str, ...]:
    """The player's concealed tiles as sorted codes, memoised on the player."""
    hand: tuple[str, ...] | None = player.derived.get("hand")
    if hand is None:
        hand = codes_of_counts(player.concealed)
        player.derived["hand"] = hand
    return hand


def _exchange_pick(player: PlayerState) -> tuple[str, ...]:
    """The codes of the player's exchange pick (kept for the rest of the game), memoised."""
    if player.exchange_pick is None:
        return ()
    pick: tuple[str, ...] | None = player.derived.get("exchange_pick")
    if pick is None:
        pick = tuple([code_of(tile) for tile in player.exchange_pick])
        player.derived["exchange_pick"] = pick
    return pick


def view_for(state: TableState, seat: int) -> TableView:
    """The seat's view: own hand and exchange pick, every meld and discard, whose turn, phase,
    legal actions now, wall remaining and the tile the seat is asked about."""
    player = state.players[seat]
    swapped = state.phase not in (Phase.DEALING, Phase.EXCHANGE)
    return table_view(
        state,
        seat,
        hand=_hand(player),
        seats=_seat_views(state, seat),
        legal_actions=legal_actions(state, seat),
        waits=_waits(state, seat),
        exchange_pick=_exchange_pick(player),
        exchange_direction=state.exchange_direction if swapped else "",
    )
