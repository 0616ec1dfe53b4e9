"""Short payers and the RULES.md 1.9a clarifications, end to end from fixed walls (issue 15).

As in `test_settlement_through_the_engine.py`: a wall built with `wall_for` makes the scenario
happen, the real table aggregate plays it, its events go through the codec into scoring's pure
`game_settlement` and the `SettlementInstructed` messages are posted on the ledger's `Book` with
the given starting balances. N = 100 beans per point unless said otherwise; the comments show the
arithmetic worked out by hand from RULES.md.
"""

from __future__ import annotations

import pytest
from mahjong_rules.room_rules import RoomRules
from mahjong_table.core.commands import Discard, ExpireDeadline, Kong, Leave, Win
from mahjong_table.core.events import GameEnded, PlayerWon
from mahjong_table.testing import Table, table_with_hands

from .money_pipeline import Money, pass_claims, settle_and_post, starting
from .test_settlement_through_the_engine import (
    TRANSFER_REFUND_HANDS,
    TRIPLE_WAIT_HANDS,
    deltas,
    exposed_kong,
    flower_pig_game,
)

N = 100
RICH = 30_000


def rules(**overrides: object) -> RoomRules:
    values: dict[str, object] = {"exchange_three": False, "coefficient": N}
    values.update(overrides)
    return RoomRules(**values)  # type: ignore[arg-type]


def play_out(table: Table) -> None:
    """Every deadline expires until the game ends (drawn tiles discarded, claims passed)."""
    while not table.state.is_over:
        table.act(ExpireDeadline())


def transfers_of(money: Money, reason: str) -> list[tuple[str, int, int, int | None]]:
    """(payer, requested, posted, income limit) of each posted transfer with that reason."""
    return [
        (
            transfer.payer_account.removeprefix("player:"),
            transfer.requested_beans,
            transfer.posted_beans,
            transfer.income_limit_beans,
        )
        for transfer in money.transfers
        if transfer.reason == reason
    ]


# ------------------------------------------------------------------ 1.9a.1 kong income received


def test_1_9a_1_a_kong_paid_short_is_refunded_only_what_was_paid() -> None:
    # Seat 0 konges 1111s (concealed, 2 points = 200 from each); seat 2 holds 50 beans and pays 50.
    # At the end seat 0 is not ready and refunds (1.8.3): 200 to seats 1 and 3, but only the 50
    # seat 2 actually paid. Seat 2 ends exactly where it started: 50 − 50 + 1600 (pig) − 1600
    # (not ready) + 50.
    money = settle_and_post(flower_pig_game().events, starting(RICH, RICH, 50, RICH))
    assert transfers_of(money, "concealed_kong") == [
        ("p1", 200, 200, None),
        ("p2", 200, 50, None),
        ("p3", 200, 200, None),
    ]
    assert transfers_of(money, "kong_refund") == [
        ("p0", 200, 200, 200),
        ("p0", 200, 50, 50),
        ("p0", 200, 200, 200),
    ]
    assert money.deltas() == deltas(
        p0=200 + 50 + 200 + 1_600 - 1_600 - 450,
        p1=-200 + 1_600 + 1_600 + 1_600 + 200,
        p2=-50 + 1_600 - 1_600 + 50,
        p3=-200 - 4_800 + 200,
    )


def test_1_9a_1_a_kong_paid_short_moves_only_what_was_received_by_call_transfer() -> None:
    # Seat 0 holds 120 beans and pays 120 of the exposed kong's 200. Seat 1 discards the
    # replacement 6s and seat 2 wins on it (×2 = 200 from seat 1); the call transfer then moves the
    # 120 seat 1 received, not 200.
    table = exposed_kong()
    table.act(Discard(1, "6s"))
    table.act(Win(2))
    money = settle_and_post(table.events, starting(120, RICH, RICH, RICH))
    assert money.lines() == [
        ("exposed_kong", "p0", (("p1", 200),)),
        ("win", "p1", (("p2", 200),)),
        ("call_transfer", "p1", (("p2", 200),)),  # instructed at most 200; limited to income
    ]
    assert transfers_of(money, "call_transfer") == [("p1", 200, 120, 120)]
    assert money.deltas() == deltas(p0=-120, p1=120 - 200 - 120, p2=200 + 120)


def test_1_9a_1_a_kong_nobody_could_pay_moves_nothing_and_a_short_not_ready_player_pays_pro_rata() -> None:
    # Seats 0 and 3 hold nothing: the exposed kong (seat 0 pays) and the concealed kong (seats 3
    # and 0 pay) earn seat 1 nothing. Seat 1 (250 beans) pays seat 2's 杠上炮 win 200, the call
    # transfer moves 0 (nothing was received), 查大叫 owes seat 3 100 and seat 0 200 from the 50
    # left: 50 × 100/300 = 16, 50 × 200/300 = 33, the remainder 1 to seat 3 (first in turn order
    # after seat 1, RULES.md 1.9); the refunds return 0 (nothing was paid).
    table = table_with_hands(
        TRANSFER_REFUND_HANDS, missing_suits="msms", head_draws="9s9s1m", tail_draws="6s7s", rules=rules()
    )
    table.act(Discard(0, "5p"))
    table.act(Kong(1))
    table.act(Discard(1, "6s"))
    table.act(Win(2))
    for seat in (3, 0):
        table.act(Discard(seat, "9s"))
        pass_claims(table)
    table.act(Kong(1, "1m"))
    table.act(Discard(1, "7s"))
    pass_claims(table)
    play_out(table)
    money = settle_and_post(table.events, starting(0, 250, RICH, 0))
    assert transfers_of(money, "call_transfer") == [("p1", 200, 0, 0)]
    assert transfers_of(money, "not_ready") == [("p1", 300, 50, None)]
    not_ready = next(transfer for transfer in money.transfers if transfer.reason == "not_ready")
    assert {posting.account: posting.beans for posting in not_ready.postings} == {
        "player:p1": -50,
        "player:p3": 17,
        "player:p0": 33,
    }
    assert transfers_of(money, "kong_refund") == [("p1", 200, 0, 0), ("p1", 200, 0, 0)]
    assert money.deltas() == deltas(p0=33, p1=-250, p2=200, p3=17)


# ------------------------------------------------------------- 1.9a.2 what one instruction is


def test_1_9a_2_multi_win_the_discarder_running_out_pays_the_winners_in_turn_order() -> None:
    # Seats 3 and 1 win on the dealer's 5p (claimed in that order); each is owed 100 but seat 0
    # holds 150. Each winner is its own instruction, in turn order after the discarder: seat 1 is
    # paid 100 in full, seat 3 gets the 50 left.
    table = table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="ssmm", rules=rules())
    table.act(Discard(0, "5p"))
    table.act(Win(3))
    table.act(Win(1))
    pass_claims(table)
    money = settle_and_post(table.events, starting(150, RICH, RICH, RICH))
    assert money.lines() == [("win", "p0", (("p1", 100),)), ("win", "p0", (("p3", 100),))]
    assert transfers_of(money, "win") == [("p0", 100, 100, None), ("p0", 100, 50, None)]
    assert money.deltas() == deltas(p0=-150, p1=100, p3=50)


def test_1_9a_2_each_kong_refund_to_one_original_payer_is_one_instruction() -> None:
    # Seat 0 starts with nothing; each refund is its own instruction, in turn order after the
    # kong player, each returning exactly what that payer paid.
    money = settle_and_post(flower_pig_game().events, starting(0, RICH, RICH, RICH))
    # Seat 0: 0 + 600 (kong) + 1600 (pig) − 1600 (查大叫 to seat 1) = 600 = the three refunds.
    assert [line for line in money.lines() if line[0] == "kong_refund"] == [
        ("kong_refund", "p0", (("p1", 200),)),
        ("kong_refund", "p0", (("p2", 200),)),
        ("kong_refund", "p0", (("p3", 200),)),
    ]
    assert money.balances()["p0"] == 0


def test_1_9a_2_a_flower_pig_pays_all_its_payees_in_one_instruction_pro_rata() -> None:
    # The pig (seat 3) has 500 − 200 (kong) = 300 for 3 × 1,600: 100 each, no remainder.
    money = settle_and_post(flower_pig_game().events, starting(RICH, RICH, RICH, 500))
    pig = next(transfer for transfer in money.transfers if transfer.reason == "flower_pig")
    assert {posting.account: posting.beans for posting in pig.postings} == {
        "player:p3": -300,
        "player:p0": 100,
        "player:p1": 100,
        "player:p2": 100,
    }


# ----------------------------------------------------------- 1.9a.3 consecutive kongs then 杠上炮

# The dealer konges 1111s, draws 3s from the tail, konges 2222s, draws 9p (its missing suit) and
# must discard it; seat 2 (123456789m 11p 99p) wins on it.
CONSECUTIVE_KONG_HANDS = ("1111s2222s123456m", "777m888m99m13579p", "123456789m1199p", "3456789s234568p")


def test_1_9a_3_after_consecutive_kongs_call_transfer_moves_the_last_kong_only() -> None:
    table = table_with_hands(CONSECUTIVE_KONG_HANDS, missing_suits="pssm", tail_draws="3s9p", rules=rules())
    table.act(Kong(0, "1s"))
    table.act(Kong(0, "2s"))
    table.act(Discard(0, "9p"))
    won = table.act(Win(2))[0]
    assert isinstance(won, PlayerWon) and won.after_kong
    money = settle_and_post(table.events, starting(RICH, RICH, RICH, RICH))
    kong_lines = [("concealed_kong", payer, (("p0", 200),)) for payer in ("p1", "p2", "p3")]
    # 平胡 ×1 × 杠上炮 ×2 = 2 points; then the income of the 2222s kong only (3 × 200) moves.
    assert money.lines()[:8] == [
        *kong_lines,
        *kong_lines,
        ("win", "p0", (("p2", 200),)),
        ("call_transfer", "p0", (("p2", 600),)),
    ]
    transfer = next(line for line in money.instructions if line.reason == "call_transfer")
    second_kong_ids = [line.instruction_id for line in money.instructions[3:6]]
    assert list(transfer.income_instruction_ids) == second_kong_ids


# ------------------------------------------------------------------- 1.9a.4 将对 needs a 2/5/8 pair

# Seat 1 holds 222m 555m 888m 222p and one more tile; the dealer discards the pair tile.
TWO_FIVE_EIGHT_DEALER = "13579m2468m13579p"
TWO_FIVE_EIGHT_OTHERS = ("123456789s1346m", "112233445566s7m")


@pytest.mark.parametrize(
    ("seat_1", "tile", "points", "fans"),
    [
        # 将对 ×8 × 断幺九 ×2 = 16 (RULES.md 1.7 example).
        pytest.param(
            "222m555m888m222p5p", "5p", 16, ["two_five_eight_pongs", "no_terminals"], id="pair-of-5"
        ),
        # The pair 9p is not a 2/5/8 tile: 碰碰胡 ×2, not 将对.
        pytest.param("222m555m888m222p9p", "9p", 2, ["all_pongs"], id="pair-of-9"),
    ],
)
def test_1_9a_4_two_five_eight_pongs_need_the_pair_to_be_2_5_or_8_too(
    seat_1: str, tile: str, points: int, fans: list[str]
) -> None:
    hands = (TWO_FIVE_EIGHT_DEALER, seat_1, *TWO_FIVE_EIGHT_OTHERS)
    table = table_with_hands(hands, missing_suits="sspp", rules=rules())
    table.act(Discard(0, tile))
    table.act(Win(1))
    pass_claims(table)
    money = settle_and_post(table.events, starting(RICH, RICH, RICH, RICH))
    assert money.lines() == [("win", "p0", (("p1", points * N),))]
    assert [fan.id for fan in money.instructions[0].fans] == fans


# ------------------------------------------------------------------- 1.9a.5 add_one and 天胡


def test_1_9a_5_add_one_gives_no_extra_point_to_a_heavenly_hand() -> None:
    # The dealer wins on its 14 dealt tiles: 平胡 × 天胡 32 = 32 points from each, no +1.
    hands = ("123456789m12355p", "123456789s1346m", "112233445566s7m", "2468m3579p3579p9m")
    table = table_with_hands(hands, missing_suits="spps", rules=rules(self_draw_bonus="add_one"))
    won = table.act(Win(0))[0]
    assert isinstance(won, PlayerWon) and won.first_turn
    money = settle_and_post(table.events, starting(RICH, RICH, RICH, RICH))
    assert money.lines()[:3] == [("win", payer, (("p0", 3_200),)) for payer in ("p1", "p2", "p3")]
    assert [fan.id for fan in money.instructions[0].fans] == ["plain", "heavenly"]


# ------------------------------------------------------- 1.9a.6 a wait on a four-held tile

# The dealer keeps 1111m 555p 777p 999p (its only "wait" is a fifth 1m) after discarding 9s; seat
# 1 is ready (2233445566778m: best wait 8m, 32); seats 2 and 3 are not ready.
FOUR_HELD_HANDS = ("1111m555p777p999p9s", "2233445566778m", "2468m3579s3579s9m", "12345678s1234p6p")


def test_1_9a_6_a_player_whose_only_wait_is_a_four_held_tile_is_not_ready_and_pays() -> None:
    table = table_with_hands(FOUR_HELD_HANDS, missing_suits="sspm", rules=rules())
    table.act(Discard(0, "9s"))
    play_out(table)
    ended = table.events[-1]
    assert isinstance(ended, GameEnded) and ended.reason == "wall_exhausted"
    money = settle_and_post(table.events, starting(RICH, RICH, RICH, RICH))
    not_ready = [line for line in money.lines() if line[0] == "not_ready"]
    assert ("not_ready", "p0", (("p1", 3_200),)) in not_ready


# ------------------------------------------------------------------- 1.9a.7 call transfer order


def test_1_9a_7_the_win_is_settled_before_the_call_transfer() -> None:
    # Seat 1 holds 50: +200 (kong) = 250; the win takes 200 first, the transfer gets the 50 left.
    table = exposed_kong()
    table.act(Discard(1, "6s"))
    table.act(Win(2))
    money = settle_and_post(table.events, starting(RICH, 50, RICH, RICH))
    assert transfers_of(money, "win") == [("p1", 200, 200, None)]
    assert transfers_of(money, "call_transfer") == [("p1", 200, 50, 200)]
    assert money.deltas() == deltas(p0=-200, p1=-50, p2=250)


# ------------------------------------------------------------- 1.9a.8 escape holding 14 tiles


def test_1_9a_8_an_escapee_holding_14_tiles_is_judged_after_its_best_discard() -> None:
    # The dealer leaves before its first discard holding 2233445566778m + 9s (its missing suit):
    # after discarding 9s it is ready, so it owes nobody 查大叫 and each compensation is the floor
    # 4 (not seat 1's 清七对 16). Penalty max(16, 64 × 3) = 192.
    hands = ("2233445566778m9s", "1122334455668p", "123456789s1346m", "112233445566s7m")
    table = table_with_hands(hands, missing_suits="smpp", rules=rules())
    table.act(Leave(0))
    money = settle_and_post(table.events, starting(RICH, RICH, RICH, RICH))
    assert money.lines()[0] == (
        "escape_penalty",
        "p0",
        (("house:escape", 19_200), ("p1", 400), ("p2", 400), ("p3", 400)),
    )


# ------------------------------------------------------------------ 1.9a.9 a flower pig escapes


def test_1_9a_9_an_escaping_flower_pig_owes_16_to_non_pigs_and_the_floor_to_a_fellow_pig() -> None:
    # The dealer (three suits, four tiles or more of each) and seat 3 are flower pigs; the dealer
    # leaves at once. Seats 1 and 2: max(4, 16) = 16 each; seat 3: max(4, 0) = 4.
    hands = ("12345m5678p12399s", "222666m44666p99p", "333444888m1125s", "789m123p456789s9m")
    table = table_with_hands(hands, missing_suits="msps", rules=rules())
    table.act(Leave(0))
    money = settle_and_post(table.events, starting(RICH, RICH, RICH, RICH))
    assert money.lines()[0] == (
        "escape_penalty",
        "p0",
        (("house:escape", 19_200), ("p1", 1_600), ("p2", 1_600), ("p3", 400)),
    )


# ------------------------------------------------------------------------------ 1.9a.10 rake


def test_1_9a_10_every_seated_player_pays_the_rake_escapees_and_an_escaped_winner_included() -> None:
    table = table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="ssmm", rules=rules(rake_beans=300))
    table.act(Discard(0, "5p"))
    table.act(Win(1))
    pass_claims(table)
    table.act(Leave(1))  # a winner escapes
    table.act(Leave(0))  # a player not yet won escapes
    play_out(table)
    money = settle_and_post(table.events, starting(RICH, RICH, RICH, RICH))
    rake = [line for line in money.lines(rake=True) if line[0] == "rake"]
    assert rake == [("rake", payer, (("house:rake", 300),)) for payer in ("p0", "p1", "p2", "p3")]
    assert money.deltas()["house:rake"] == 1_200
