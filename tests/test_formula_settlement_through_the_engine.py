"""Formula (公式) settlement rules from fixed walls, through the table engine, scoring and the
ledger's double entry (RULES.md 2.1-2.3). Each test plays a scenario on the formula aggregate,
then checks the beans against numbers worked out from RULES.md 2.3 in the test:
per payer X = fan_term × bird_factor × dealer_factor, beans = X × N, and the rake A from each."""

from __future__ import annotations

from mahjong_rules.formula.scoring import bird_seat
from mahjong_rules.room_rules import RoomRules
from mahjong_rules.tiles import parse_tile
from mahjong_table.core.commands import Discard, Kong, Pass, Pong, Win
from mahjong_table.core.events import BirdRevealed, KongRobbed, PlayerWon, TableEvent
from mahjong_table.testing import FormulaTable, formula_table_with_hands

from .money_pipeline import settle_and_post, starting

N, A = 200, 20
RICH = starting(100_000, 100_000, 100_000, 100_000)


def rules(fan_term: str = "fan_plus_8") -> RoomRules:
    return RoomRules(
        variant="formula", exchange_three=False, coefficient=N, rake_beans=A, min_fan=0, fan_term=fan_term
    )


def win_and_bird(events: list[TableEvent]) -> tuple[PlayerWon, BirdRevealed]:
    won = next(event for event in events if isinstance(event, PlayerWon))
    bird = next(event for event in events if isinstance(event, BirdRevealed))
    return won, bird


# Dealer 0 discards 3m, seat 1 pongs it (seat 2, able to win on it, passes), then seat 1 draws the
# fourth 3m and adds it to its pong; seat 2 waits on 3m (edge 12m) and robs the kong.
ROB_HANDS = ("3m124578p124578s1z", "33m469p469s23455z", "12m666m456p789s99m", "112m7m18p89s12344z")


def robbed_kong_table(fan_term: str) -> FormulaTable:
    table = formula_table_with_hands(ROB_HANDS, rules(fan_term), head="6s5m3p3m", tail="9p")
    table.act(Discard(0, "3m"))
    table.act(Pass(2))
    table.act(Pong(1))
    table.act(Discard(1, "9p"))
    for seat, tile in ((2, "6s"), (3, "5m"), (0, "3p")):
        table.act(Discard(seat, tile))
    table.act(Kong(1, "3m"))
    events = table.act(Win(2))
    assert isinstance(events[0], KongRobbed)
    return table


def test_2_3_a_robbed_kong_is_paid_by_the_declarer_alone_as_a_discard_win() -> None:
    for fan_term in ("fan", "fan_plus_8", "flat_10"):
        table = robbed_kong_table(fan_term)
        won, bird = win_and_bird(table.events)
        assert (won.win_by, won.from_seat) == ("rob_kong", 1)
        money = settle_and_post(table.events, RICH)
        # RULES.md 2.3: discard-like win, only the declarer pays; the bird doubles it when it lands
        # on the winner or the payer; neither is the dealer (seat 0), so no dealer doubling.
        term = {"fan": won.fan_total, "fan_plus_8": won.fan_total + 8, "flat_10": 10}[fan_term]
        x = term * (2 if bird.seat in (1, 2) else 1)
        assert money.lines() == [("win", "p1", (("p2", x * N),))]
        assert money.deltas() == {
            "p0": -A,
            "p1": -x * N - A,
            "p2": x * N - A,
            "p3": -A,
            "house:rake": 4 * A,
            "house:escape": 0,
        }
        fans = {fan.id: fan for fan in money.instructions[0].fans}
        assert "robbing_the_kong" in fans and sum(fan.multiplier * fan.count for fan in fans.values()) == (
            won.fan_total
        )


# The dealer's 14 as dealt are a winning hand (123m 456m 789m 123p 55p).
FIRST_TURN_HANDS = ("123456789m12355p", "33m469p469s23455z", "12m666m456p789s99m", "112m7m18p89s12344z")


def test_2_3_the_dealer_wins_on_the_deal_every_payment_doubled_and_the_bird_on_top() -> None:
    table = formula_table_with_hands(FIRST_TURN_HANDS, rules("fan"))
    table.act(Win(0))
    won, bird = win_and_bird(table.events)
    assert won.first_turn and won.win_by == "self_draw"
    assert bird.seat == bird_seat(0, parse_tile(bird.tile))
    money = settle_and_post(table.events, RICH)
    # Self-draw: all three pay; 庄家翻倍 doubles each payment (the winner is the dealer); the bird on
    # the winner doubles all three, on another seat only that seat (RULES.md 2.3).
    owed = {}
    for payer in (1, 2, 3):
        bird_factor = 2 if bird.seat in (0, payer) else 1
        owed[f"p{payer}"] = won.fan_total * bird_factor * 2 * N
    assert sorted(money.lines()) == sorted(("win", payer, (("p0", beans),)) for payer, beans in owed.items())
    deltas = money.deltas()
    assert deltas["p0"] == sum(owed.values()) - A
    assert all(deltas[payer] == -beans - A for payer, beans in owed.items())


def test_every_settlement_line_names_the_seats_of_its_players_and_none_for_the_house() -> None:
    table = robbed_kong_table("fan")
    money = settle_and_post(table.events, RICH)
    for line in money.instructions:
        assert line.HasField("payer_seat") and line.payer_account == f"player:p{line.payer_seat}"
        for payee in line.payees:
            if payee.account.startswith("house:"):
                assert not payee.HasField("seat")
            else:
                assert payee.HasField("seat") and payee.account == f"player:p{payee.seat}"
    win = next(line for line in money.instructions if line.reason == "win")
    assert (win.payer_seat, [payee.seat for payee in win.payees]) == (1, [2])
