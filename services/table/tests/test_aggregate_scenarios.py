"""Table-driven scenarios from fixed walls (RULES.md 1.1-1.6, 1.10): each builds the exact deal
with `table_with_hands` and plays the commands of the rule it names."""

from __future__ import annotations

import pytest
from mahjong_rules.room_rules import RoomRules
from mahjong_table.core.commands import (
    DeclareMissingSuit,
    Discard,
    ExchangeThree,
    ExpireDeadline,
    Kong,
    Leave,
    Pass,
    Pong,
    Win,
)
from mahjong_table.core.errors import IllegalKongError, IllegalWinError, NotYourTurnError
from mahjong_table.core.events import (
    ClaimPassed,
    ExchangePicked,
    GameEnded,
    KongDeclared,
    KongRobbed,
    MissingSuitsDeclared,
    PlayerLeft,
    PlayerWon,
    PongClaimed,
    TileDrawn,
    TilesExchanged,
    TurnTimedOut,
    WallExhausted,
)
from mahjong_table.core.state import Phase
from mahjong_table.servicer import table_view_message
from mahjong_table.sichuan.evolve import fold
from mahjong_table.sichuan.views import legal_actions, view_for
from mahjong_table.testing import Table, table_with_hands, tiles_accounted

# Dealer 0 discards 5p first; seats 1, 2 and 3 all wait on 5p (RULES.md 1.4 一炮多响).
TRIPLE_WAIT_HANDS = ("112345678p56789m", "123456789m4699p", "111222333789s5p", "123456789s99s55p")


def hand_of(table: Table, seat: int) -> str:
    """The seat's concealed tiles as sorted codes joined by spaces."""
    counts = table.state.players[seat].concealed
    return " ".join(f"{tile % 9 + 1}{'mps'[tile // 9]}" for tile in range(27) for _ in range(counts[tile]))


def kinds(events: list[object]) -> list[str]:
    return [type(event).__name__ for event in events]


def assert_consistent(table: Table) -> None:
    assert tiles_accounted(table.state) == 108
    assert fold(table.events) == table.state


# ------------------------------------------------------------------------------------ exchange three


EXCHANGE_HANDS = ("123456789m12345p", "123456789p1234s", "123456789s1234m", "56789s56789m678p")
EXCHANGE_PICKS = ("1m 2m 3m", "1p 2p 3p", "1s 2s 3s", "6p 7p 8p")


@pytest.mark.parametrize(
    ("direction", "receivers"),
    [
        pytest.param("clockwise", (3, 0, 1, 2), id="RULES-1.2-clockwise-gives-to-seat-minus-1"),
        pytest.param("counter_clockwise", (1, 2, 3, 0), id="RULES-1.2-counter-clockwise-to-seat-plus-1"),
        pytest.param("opposite", (2, 3, 0, 1), id="RULES-1.2-opposite-gives-to-seat-plus-2"),
    ],
)
def test_exchange_three_swaps_all_picks_at_once_in_the_drawn_direction(
    direction: str, receivers: tuple[int, ...]
) -> None:
    table = table_with_hands(EXCHANGE_HANDS, rules=RoomRules(), exchange_direction=direction)
    assert table.state.phase is Phase.EXCHANGE
    before = [hand_of(table, seat) for seat in range(4)]
    for seat in range(3):
        events = table.act(ExchangeThree(seat, tuple(EXCHANGE_PICKS[seat].split())))
        assert kinds(events) == ["ExchangePicked"]  # hidden pick, no swap before all four are in
    assert [hand_of(table, seat) for seat in range(4)] == before
    events = table.act(ExchangeThree(3, tuple(EXCHANGE_PICKS[3].split())))
    assert kinds(events) == ["ExchangePicked", "TilesExchanged"]
    exchanged = events[1]
    assert isinstance(exchanged, TilesExchanged) and exchanged.direction == direction
    assert [(t.from_seat, t.to_seat) for t in exchanged.transfers] == list(enumerate(receivers))
    for giver, receiver in enumerate(receivers):
        received = sorted(hand_of(table, receiver).split())
        for tile in EXCHANGE_PICKS[giver].split():
            assert tile in received
    assert table.state.phase is Phase.MISSING_SUIT
    assert_consistent(table)


def test_exchange_timeout_picks_the_shortest_suit_of_at_least_three_lowest_ranks_rules_1_2() -> None:
    table = table_with_hands(EXCHANGE_HANDS, rules=RoomRules())
    table.act(ExchangeThree(0, ("1m", "2m", "3m")))
    events = table.act(ExpireDeadline())
    picks = {event.seat: event.tiles for event in events if isinstance(event, ExchangePicked)}
    assert picks == {1: ("1s", "2s", "3s"), 2: ("1m", "2m", "3m"), 3: ("6p", "7p", "8p")}
    assert all(event.automatic for event in events if isinstance(event, ExchangePicked))
    assert [e.seat for e in events if isinstance(e, TurnTimedOut)] == [1, 2, 3]
    assert isinstance(events[-1], TilesExchanged)


def test_missing_suits_are_revealed_only_when_all_four_are_in_and_the_dealer_starts_rules_1_3() -> None:
    table = table_with_hands(TRIPLE_WAIT_HANDS)
    for seat, suit in enumerate("ssm"):
        assert kinds(table.act(DeclareMissingSuit(seat, suit))) == ["MissingSuitChosen"]
    events = table.act(DeclareMissingSuit(3, "m"))
    assert isinstance(events[-1], MissingSuitsDeclared) and events[-1].suits == ("s", "s", "m", "m")
    assert table.state.phase is Phase.TURN and table.state.turn_seat == 0
    assert table.state.drawn_tile is None  # the dealer discards first, from 14 tiles (RULES.md 1.4)


# ------------------------------------------------------------------------------------ wins


def test_several_players_win_on_one_discard_and_play_goes_on_after_the_farthest_rules_1_4_1_6() -> None:
    table = table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="ssmm")
    table.act(Discard(0, "5p"))
    assert table.state.window is not None and table.state.window.pending == {1, 2, 3}
    first = table.act(Win(1))
    assert kinds(first) == ["PlayerWon"]
    won = first[0]
    assert isinstance(won, PlayerWon)
    assert (won.win_by, won.from_seat, won.win_order, won.win_tile) == ("discard", 0, 1, "5p")
    passed = table.act(Pass(3))
    assert isinstance(passed[0], ClaimPassed) and passed[0].passed_win
    events = table.act(Win(2))
    assert kinds(events) == ["PlayerWon", "TileDrawn"]  # seat 3's pair of 5p cannot pong: wins beat it
    assert isinstance(events[0], PlayerWon) and events[0].win_order == 2
    assert isinstance(events[1], TileDrawn) and events[1].seat == 3  # after seat 2, farthest from 0
    assert table.state.win_count == 2
    assert_consistent(table)


def test_three_wins_on_one_discard_end_the_game_rules_1_6() -> None:
    table = table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="ssmm")
    table.act(Discard(0, "5p"))
    table.act(Win(3))
    table.act(Win(1))
    events = table.act(Win(2))
    assert kinds(events) == ["PlayerWon", "GameEnded"]
    ended = events[-1]
    assert isinstance(ended, GameEnded) and ended.reason == "three_wins"
    assert [hand.won for hand in ended.hands] == [False, True, True, True]
    assert table.state.is_over
    assert_consistent(table)


def test_players_who_can_do_nothing_are_not_asked_rules_1_4() -> None:
    table = table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="ssmm")
    table.act(Discard(0, "7m"))
    # Nobody can win or pong 7m: the next player draws at once.
    assert table.state.phase is Phase.TURN and table.state.turn_seat == 1
    assert [action.kind for action in legal_actions(table.state, 2)] == ["leave"]


# Seat 3 (missing s) waits on 8p (×1) and 1m (×2 with its fourth 1m, a 根).
SKIP_WIN_HANDS = ("1234568p1234567s", "1237899p123789s", "1234567m456789s", "11123456789m88p")


@pytest.mark.parametrize(
    ("skip_win_lock", "offered_again"),
    [
        pytest.param(True, False, id="RULES-1.4-skip-win-lock-on"),
        pytest.param(False, True, id="RULES-1.4-skip-win-lock-off"),
    ],
)
def test_a_passed_win_locks_wins_on_discards_until_the_next_draw(
    skip_win_lock: bool, offered_again: bool
) -> None:
    rules = RoomRules(exchange_three=False, skip_win_lock=skip_win_lock)
    table = table_with_hands(SKIP_WIN_HANDS, rules=rules, missing_suits="mmps", head_draws="5p9s")
    table.act(Discard(0, "8p"))
    assert table.state.window is not None and table.state.window.win_offers[3] == 1
    events = table.act(Pass(3))
    assert (
        isinstance(events[0], ClaimPassed) and events[0].passed_win and events[0].passed_win_multiplier == 1
    )
    table.act(Pass(3))  # the pong offer on the same 8p
    assert table.state.turn_seat == 1
    table.act(Discard(1, "8p"))
    window = table.state.window
    assert window is not None
    if offered_again:
        assert window.win_offers[3] == 1
        table.act(Pass(3))
    else:
        assert window.win_offers[3] == 0  # same multiplier: locked
        with pytest.raises(IllegalWinError, match="skip-win lock"):
            table.act(Win(3))
    table.act(Pass(3))  # decline the pong
    assert table.state.turn_seat == 2
    table.act(Discard(2, "1m"))
    # RULES.md 1.4: a higher multiplier (×2, the fourth 1m is a 根) lifts the lock.
    events = table.act(Win(3))
    won = events[0]
    assert isinstance(won, PlayerWon) and won.multiplier == 2 and won.from_seat == 2
    assert_consistent(table)


def test_the_skip_win_lock_ends_with_the_players_own_draw_rules_1_4() -> None:
    table = table_with_hands(SKIP_WIN_HANDS, missing_suits="mmps", head_draws="5p9s6m")
    table.act(Discard(0, "8p"))
    table.act(Pass(3))
    table.act(Pass(3))
    assert table.state.players[3].skip_win_multiplier == 1
    table.act(Discard(1, "5p"))
    table.act(Discard(2, "9s"))
    assert table.state.turn_seat == 3 and table.state.players[3].skip_win_multiplier == 0


# ------------------------------------------------------------------------------------ kongs

# Seat 2 pongs the dealer's 5p, draws the fourth 5p and adds it; seat 3 waits on 5p only.
ROB_HANDS = ("1235p1123456789s", "1122334m667788p", "23455789p12346s", "123456789s4699p")


def _pong_then_add_kong(table: Table) -> list[object]:
    table.act(Discard(0, "5p"))
    table.act(Pass(3))  # seat 3 could win on 5p; it passes (the lock ends with its next draw)
    events = table.act(Pong(2))
    assert isinstance(events[0], PongClaimed)
    table.act(Discard(2, "2p"))
    table.act(Discard(3, "9m"))
    table.act(Discard(0, "9m"))
    table.act(Discard(1, "5m"))
    assert table.state.turn_seat == 2 and table.state.drawn_tile == 13  # 5p
    return list(table.act(Kong(2, "5p")))


def test_an_added_kong_is_robbed_by_a_player_who_wins_on_its_tile_rules_1_5() -> None:
    table = table_with_hands(ROB_HANDS, missing_suits="msmm", head_draws="9m9m5m5p6m")
    events = _pong_then_add_kong(table)
    assert kinds(events) == ["KongDeclared"]
    assert isinstance(events[0], KongDeclared) and events[0].exposure == "added"
    assert [action.kind for action in legal_actions(table.state, 3)] == ["win", "pass", "leave"]
    assert [action.kind for action in legal_actions(table.state, 1)] == ["leave"]  # no pong on a kong
    events = table.act(Win(3))
    assert kinds(events) == ["PlayerWon", "KongRobbed", "TileDrawn"]
    won, robbed, drawn = events
    assert isinstance(won, PlayerWon) and won.win_by == "rob_kong" and won.from_seat == 2
    assert "rob_kong" in [fan.id for fan in won.fans]
    assert isinstance(robbed, KongRobbed) and robbed.winner_seats == (3,) and robbed.kong_seat == 2
    assert isinstance(drawn, TileDrawn) and drawn.seat == 0 and drawn.tile == "6m" and not drawn.from_tail
    assert [meld.kind for meld in table.state.players[2].melds] == ["pong"]  # the kong is void
    assert_consistent(table)


def test_a_robbing_win_that_ends_the_game_still_voids_the_kong_rules_1_5_1_10() -> None:
    table = table_with_hands(ROB_HANDS, missing_suits="msmm", head_draws="9m9m5m5p6m")
    _pong_then_add_kong(table)
    table.act(Leave(1))
    table.act(Leave(0))  # seats 2 and 3 remain in the game
    events = table.act(Win(3))  # seat 3 robs: only seat 2 is left in the game
    assert kinds(events) == ["PlayerWon", "KongRobbed", "GameEnded"]
    assert [meld.kind for meld in table.state.players[2].melds] == ["pong"]
    assert_consistent(table)


def test_an_added_kong_nobody_robs_draws_its_replacement_from_the_tail_rules_1_5() -> None:
    table = table_with_hands(ROB_HANDS, missing_suits="msmm", head_draws="9m9m5m5p6m", tail_draws="7s")
    _pong_then_add_kong(table)
    events = table.act(Pass(3))
    assert kinds(events) == ["ClaimPassed", "TileDrawn"]
    drawn = events[1]
    assert isinstance(drawn, TileDrawn) and drawn.seat == 2 and drawn.from_tail and drawn.tile == "7s"
    assert [(meld.kind, meld.exposure) for meld in table.state.players[2].melds] == [("kong", "added")]
    assert_consistent(table)


def test_a_concealed_kong_draws_its_replacement_from_the_tail_rules_1_5() -> None:
    hands = ("1111s2345678p123m", "123456789m4699p", "222333789s15p99s", "456789m123456p9s")
    table = table_with_hands(hands, missing_suits="msmp", tail_draws="9p")
    events = table.act(Kong(0, "1s"))
    assert kinds(events) == ["KongDeclared", "TileDrawn"]
    assert isinstance(events[1], TileDrawn) and events[1].from_tail and events[1].tile == "9p"
    assert table.state.turn_after_kong
    assert_consistent(table)


# Seat 1 konges the dealer's 5p, draws 6s from the tail and must discard it (missing s); seat 2 wins.
KONG_DISCARD_HANDS = ("1235p1112223344s", "555p123456789m1p", "678p789p45678s99s", "1234567899m234p")


def test_a_win_on_the_discard_right_after_a_kong_is_kong_discard_rules_1_5_1_7() -> None:
    table = table_with_hands(KONG_DISCARD_HANDS, missing_suits="msms", tail_draws="6s")
    table.act(Discard(0, "5p"))
    assert [action.kind for action in legal_actions(table.state, 1)] == ["pong", "kong", "pass", "leave"]
    events = table.act(Kong(1))
    assert kinds(events) == ["KongDeclared", "TileDrawn"]
    declared, drawn = events
    assert isinstance(declared, KongDeclared) and (declared.exposure, declared.from_seat) == ("exposed", 0)
    assert isinstance(drawn, TileDrawn) and drawn.from_tail and drawn.tile == "6s"
    assert table.state.players[0].discards == ()  # the konged discard left the discard pile
    table.act(Discard(1, "6s"))
    won = table.act(Win(2))[0]
    assert isinstance(won, PlayerWon) and won.after_kong and won.from_seat == 1
    assert "kong_discard" in [fan.id for fan in won.fans]
    assert_consistent(table)


def test_the_dealer_wins_on_the_initial_fourteen_tiles_heavenly_rules_1_7() -> None:
    hands = ("1112223334445m5m", "123456789p1234s", "123456789s5678m", "6677889m556789p")
    table = table_with_hands(hands, missing_suits="smps")
    won = table.act(Win(0))[0]
    assert isinstance(won, PlayerWon) and won.first_turn and won.win_by == "self_draw"
    assert "heavenly" in [fan.id for fan in won.fans]
    assert_consistent(table)


# Dealer 1. Seat 0 keeps 1111s and 999s to the end; seat 1 waits on 9s only.
LAST_TILE_HANDS = ("1111s999s234678p", "111222333444m9s5p", "5566778899m115p", "5566778899m234s")


def test_no_kong_on_the_last_tile_and_the_last_discard_can_still_be_won_rules_1_4_1_5() -> None:
    table = table_with_hands(LAST_TILE_HANDS, dealer_seat=1, missing_suits="mpsp")
    assert any(action.kind == "kong" for action in legal_actions(table.state, 1)) is False
    while not (
        table.state.phase is Phase.TURN and table.state.turn_seat == 0 and table.state.wall_remaining == 0
    ):
        table.act(ExpireDeadline())
        assert not table.state.is_over
    assert "kong" not in [action.kind for action in legal_actions(table.state, 0)]
    with pytest.raises(IllegalKongError, match="wall is empty"):
        table.act(Kong(0, "1s"))
    table.act(Discard(0, "9s"))
    assert table.state.window is not None and table.state.window.pending == {1}
    events = table.act(Win(1))
    assert kinds(events) == ["PlayerWon", "WallExhausted", "GameEnded"]
    assert isinstance(events[-1], GameEnded) and events[-1].reason == "wall_exhausted"
    assert isinstance(events[1], WallExhausted)
    assert_consistent(table)


# ------------------------------------------------------------------------------------ escapes


def test_a_winner_who_leaves_is_not_penalised_and_the_game_goes_on_rules_1_10() -> None:
    table = table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="ssmm")
    table.act(Discard(0, "5p"))
    table.act(Win(1))
    table.act(Pass(3))
    table.act(Win(2))
    events = table.act(Leave(2))
    assert events == [PlayerLeft(2, "leave", had_won=True)]
    assert table.state.phase is Phase.TURN and table.state.turn_seat == 3
    assert_consistent(table)


def test_a_non_winner_who_leaves_takes_no_further_part_rules_1_10() -> None:
    table = table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="ssmm")
    events = table.act(Leave(3, "disconnected"))
    assert events == [PlayerLeft(3, "disconnected", had_won=False)]
    table.act(Discard(0, "5p"))
    window = table.state.window
    assert window is not None and window.pending == {1, 2}  # the escapee is not asked
    table.act(Win(1))
    events = table.act(Win(2))
    # Two winners and one escapee leave a single player: the game ends at once (RULES.md 1.10).
    assert kinds(events) == ["PlayerWon", "GameEnded"]
    assert isinstance(events[-1], GameEnded) and events[-1].reason == "escapes"
    assert_consistent(table)


def test_the_game_ends_at_once_when_fewer_than_two_players_remain_rules_1_10() -> None:
    table = table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="ssmm")
    table.act(Leave(1))
    table.act(Leave(2))
    events = table.act(Leave(0))
    assert kinds(events) == ["PlayerLeft", "GameEnded"]
    assert table.state.end_reason == "escapes"


def test_leaving_on_ones_own_turn_passes_the_turn_on_rules_1_10() -> None:
    table = table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="ssmm")
    events = table.act(Leave(0))
    assert kinds(events) == ["PlayerLeft", "TileDrawn"]
    assert isinstance(events[1], TileDrawn) and events[1].seat == 1
    with pytest.raises(NotYourTurnError):
        table.act(Discard(2, "5p"))


def test_leaving_during_the_exchange_picks_for_the_escapee_so_the_swap_can_happen_rules_1_10() -> None:
    table = table_with_hands(EXCHANGE_HANDS, rules=RoomRules())
    for seat in range(3):
        table.act(ExchangeThree(seat, tuple(EXCHANGE_PICKS[seat].split())))
    events = table.act(Leave(3))
    assert kinds(events) == ["PlayerLeft", "ExchangePicked", "TilesExchanged", "MissingSuitChosen"]
    assert table.state.players[3].missing_suit is not None  # the escapee is declared for, too
    assert_consistent(table)


def test_leaving_before_the_exchange_starts_the_others_still_exchange_and_declare_rules_1_10() -> None:
    table = table_with_hands(EXCHANGE_HANDS, rules=RoomRules())
    assert kinds(table.act(Leave(2))) == ["PlayerLeft", "ExchangePicked"]
    for seat in (0, 1):
        table.act(ExchangeThree(seat, tuple(EXCHANGE_PICKS[seat].split())))
    events = table.act(ExchangeThree(3, tuple(EXCHANGE_PICKS[3].split())))
    assert kinds(events) == ["ExchangePicked", "TilesExchanged", "MissingSuitChosen"]
    for seat, suit in ((0, "p"), (1, "s")):
        table.act(DeclareMissingSuit(seat, suit))
    events = table.act(DeclareMissingSuit(3, "p"))
    assert kinds(events) == ["MissingSuitChosen", "MissingSuitsDeclared"]
    assert_consistent(table)


# ------------------------------------------------------------------------------------ timeouts


def test_a_timed_out_turn_discards_the_missing_suit_first_never_wins_issue_4() -> None:
    table = table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="pssm")  # dealer 0 holds p tiles
    events = table.act(ExpireDeadline())
    assert isinstance(events[0], TurnTimedOut) and events[0].phase == "turn"
    assert kinds(events)[1] == "TileDiscarded"
    assert getattr(events[1], "tile", "").endswith("p") and getattr(events[1], "automatic", False)


# Seat 1 waits on 5p and draws it first.
SELF_DRAW_HANDS = ("112345678p56789m", "123456789m4699p", "111222333789s5p", "1122334455m667s")


def test_a_timed_out_self_draw_win_position_discards_instead_issue_4() -> None:
    # Seat 1 draws 5p, completing its hand; the deadline expires: the drawn tile is discarded.
    table = table_with_hands(SELF_DRAW_HANDS, missing_suits="ssmp", head_draws="5p")
    table.act(Discard(0, "7m"))
    assert "win" in [action.kind for action in legal_actions(table.state, 1)]
    events = table.act(ExpireDeadline())
    assert kinds(events)[:2] == ["TurnTimedOut", "TileDiscarded"]
    assert not table.state.players[1].won


def test_a_self_draw_win_records_the_evaluation_rules_1_6_1_7() -> None:
    table = table_with_hands(SELF_DRAW_HANDS, missing_suits="ssmp", head_draws="5p")
    table.act(Discard(0, "7m"))
    events = table.act(Win(1))
    won = events[0]
    assert isinstance(won, PlayerWon) and won.win_by == "self_draw" and won.from_seat == -1
    assert won.first_turn  # 地胡: the first draw, before any pong or kong
    assert "earthly" in [fan.id for fan in won.fans]
    assert isinstance(events[1], TileDrawn) and events[1].seat == 2
    assert_consistent(table)


def test_a_seat_sees_its_own_waits_in_its_view_rules_1_6() -> None:
    table = table_with_hands(SKIP_WIN_HANDS, missing_suits="smms")
    assert view_for(table.state, 3).waits == ("1m", "4m", "7m", "8p")  # 111 + 23456789m + 88p
    assert table_view_message(table.state, 3, None).waits == "147m8p"
    assert table_view_message(table.state, 0, None).waits == ""  # the dealer holds 14 tiles
