"""Every settlement rule of RULES.md 1.5-1.10 end to end, from a fixed wall (issue 5, Tests).

Each case deals a wall built with `wall_for` so that the scenario happens, drives the real table
aggregate with commands, publishes its events through the table codec in envelopes, settles them
with scoring's pure `game_settlement` and posts the `SettlementInstructed` messages on the
ledger's `Book` with the given starting balances. The expected beans are worked out by hand from
RULES.md (N = 100 beans per point unless said otherwise); the comments show the arithmetic.

Every scenario was reachable through the engine; none is tested at the scoring level only.
"""

from __future__ import annotations

from collections import Counter

import pytest
from mahjong_rules.room_rules import RoomRules
from mahjong_rules.tiles import parse_tiles, tile_code
from mahjong_table.core.commands import Discard, ExpireDeadline, Kong, Leave, Pass, Pong, Win
from mahjong_table.core.events import GameEnded, KongRobbed, PlayerWon
from mahjong_table.testing import Table, table_with_hands

from .money_pipeline import pass_claims, settle_and_post, starting

N = 100
RICH = starting(30_000, 30_000, 30_000, 30_000)


def rules(**overrides: object) -> RoomRules:
    values: dict[str, object] = {"exchange_three": False, "coefficient": N}
    values.update(overrides)
    return RoomRules(**values)  # type: ignore[arg-type]


def play_out(table: Table) -> None:
    """Let every deadline expire until the game ends: each player discards what they draw (their
    missing suit first) and every claim is passed, so the hands stay as the scenario made them."""
    while not table.state.is_over:
        table.act(ExpireDeadline())


def draws_keeping_a_flower_pig(
    hands: tuple[str, ...], tail_draws: str, pig_seat: int, pig_missing_suit: str, first_seat: int
) -> str:
    """Head draws for the whole wall such that `pig_seat` only ever draws tiles of its missing
    suit (and discards them), so it is still a flower pig when the wall is exhausted. Draws go
    round the table from `first_seat`, as they do when every claim is passed."""
    used = Counter(tile for hand in hands for tile in parse_tiles(hand)) + Counter(parse_tiles(tail_draws))
    rest = [tile for tile in range(27) for _ in range(4 - used[tile])]
    order = [(first_seat + index) % 4 for index in range(len(rest))]
    of_suit = [tile for tile in rest if tile_code(tile)[1] == pig_missing_suit]
    for_pig = of_suit[: order.count(pig_seat)]
    assert len(for_pig) == order.count(pig_seat), "not enough tiles of the pig's missing suit"
    others = [tile for tile in rest if tile_code(tile)[1] != pig_missing_suit] + of_suit[len(for_pig) :]
    return "".join(tile_code(for_pig.pop(0) if seat == pig_seat else others.pop(0)) for seat in order)


# ----------------------------------------------------------------------------------- kongs (1.5)

# Seat 1 konges the dealer's 5p and draws 6s from the tail; after its discard of 6s seat 2 (and,
# in KONG_TWO_WINNERS_HANDS, seat 3 too) wins on it.
KONG_DISCARD_HANDS = ("1235p1112223344s", "555p123456789m1p", "678p789p45678s99s", "1234567899m234p")
KONG_TWO_WINNERS_HANDS = ("1235p1112223344s", "555p123456789m1p", "678p789p45678s99s", "123456789m4599s")
# Seat 2 pongs the dealer's 5p, draws the fourth 5p and adds it; seat 3 waits on 5p.
ROB_HANDS = ("1235p1123456789s", "1122334m667788p", "23455789p12346s", "123456789s4699p")
CONCEALED_KONG_HANDS = ("1111s2345678p123m", "123456789m4699p", "222333789s15p99s", "456789m123456p9s")


def exposed_kong() -> Table:
    table = table_with_hands(KONG_DISCARD_HANDS, missing_suits="msms", tail_draws="6s", rules=rules())
    table.act(Discard(0, "5p"))
    table.act(Kong(1))
    return table


def _pong_then_add_kong() -> Table:
    table = table_with_hands(
        ROB_HANDS, missing_suits="msmm", head_draws="9m9m5m5p6m", tail_draws="7s", rules=rules()
    )
    table.act(Discard(0, "5p"))
    table.act(Pass(3))
    table.act(Pong(2))
    table.act(Discard(2, "2p"))
    table.act(Discard(3, "9m"))
    table.act(Discard(0, "9m"))
    table.act(Discard(1, "5m"))
    table.act(Kong(2, "5p"))
    return table


def test_1_5_exposed_kong_the_discarder_pays_2() -> None:
    money = settle_and_post(exposed_kong().events, RICH)
    assert money.lines() == [("exposed_kong", "p0", (("p1", 200),))]
    assert money.deltas() == deltas(p0=-200, p1=200)


def test_1_5_added_kong_every_other_player_pays_1_once_nobody_robs_it() -> None:
    table = _pong_then_add_kong()
    # The kong is not paid while it can still be robbed (its claim window is open).
    assert settle_and_post(table.events, RICH).lines() == []
    table.act(Pass(3))
    money = settle_and_post(table.events, RICH)
    assert money.lines() == [("added_kong", payer, (("p2", 100),)) for payer in ("p3", "p0", "p1")]
    assert money.deltas() == deltas(p0=-100, p1=-100, p2=300, p3=-100)


def test_1_5_concealed_kong_every_other_player_pays_2() -> None:
    table = table_with_hands(CONCEALED_KONG_HANDS, missing_suits="msmp", tail_draws="9p", rules=rules())
    table.act(Kong(0, "1s"))
    money = settle_and_post(table.events, RICH)
    assert money.lines() == [("concealed_kong", payer, (("p0", 200),)) for payer in ("p1", "p2", "p3")]
    assert money.deltas() == deltas(p0=600, p1=-200, p2=-200, p3=-200)


def test_1_5_robbing_an_added_kong_voids_it_and_the_declarer_pays_like_a_discarder() -> None:
    table = _pong_then_add_kong()
    events = table.act(Win(3))
    assert any(isinstance(event, KongRobbed) for event in events)
    money = settle_and_post(table.events, RICH)
    # Seat 3: 123456789s 46p 99p + 5p, plain ×1 × rob_kong ×2 = 2 points; no added_kong income.
    assert money.lines() == [("win", "p2", (("p3", 200),))]
    assert [fan.id for fan in money.instructions[0].fans] == ["plain", "rob_kong"]
    assert money.deltas() == deltas(p2=-200, p3=200)


def test_1_5_call_transfer_moves_the_kong_income_to_the_one_winner() -> None:
    table = exposed_kong()
    table.act(Discard(1, "6s"))
    table.act(Win(2))
    money = settle_and_post(table.events, RICH)
    # Seat 2 wins ×2 (plain × kong_discard); seat 1 then hands its kong income (2 from seat 0) on.
    assert money.lines() == [
        ("exposed_kong", "p0", (("p1", 200),)),
        ("win", "p1", (("p2", 200),)),
        ("call_transfer", "p1", (("p2", 200),)),
    ]
    assert money.deltas() == deltas(p0=-200, p1=-200, p2=400)


def test_1_5_no_call_transfer_when_two_players_win_on_the_discard_after_the_kong() -> None:
    table = table_with_hands(KONG_TWO_WINNERS_HANDS, missing_suits="msmp", tail_draws="6s", rules=rules())
    table.act(Discard(0, "5p"))
    table.act(Kong(1))
    table.act(Discard(1, "6s"))
    table.act(Win(2))
    table.act(Win(3))
    money = settle_and_post(table.events, RICH)
    assert money.lines() == [
        ("exposed_kong", "p0", (("p1", 200),)),
        ("win", "p1", (("p2", 200),)),
        ("win", "p1", (("p3", 200),)),
    ]
    assert money.deltas() == deltas(p0=-200, p1=-200, p2=200, p3=200)


# ------------------------------------------------------------------------------------ wins (1.6)

# Dealer 0 discards 5p; seats 1, 2 and 3 all wait on 5p (each ×1).
TRIPLE_WAIT_HANDS = ("112345678p56789m", "123456789m4699p", "111222333789s5p", "123456789s99s55p")


def test_1_6_discard_win_the_discarder_pays() -> None:
    table = table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="ssmm", rules=rules())
    table.act(Discard(0, "5p"))
    table.act(Win(1))
    pass_claims(table)
    money = settle_and_post(table.events, RICH)
    assert money.lines() == [("win", "p0", (("p1", 100),))]
    assert money.deltas() == deltas(p0=-100, p1=100)


def test_1_6_multi_win_on_one_discard_the_discarder_pays_each_winner() -> None:
    table = table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="ssmm", rules=rules())
    table.act(Discard(0, "5p"))
    table.act(Win(1))
    table.act(Pass(3))
    table.act(Win(2))
    money = settle_and_post(table.events, RICH)
    assert money.lines() == [("win", "p0", (("p1", 100),)), ("win", "p0", (("p2", 100),))]
    assert money.deltas() == deltas(p0=-200, p1=100, p2=100)


# The RULES.md 1.9 worked example: seat 1 konges 1111p (concealed, 2 points from each), later
# self-draws 9p: 清一色 4 × 根 2 × 自摸 2 = 16. 2 + 16 = 18 points from each of three losers; nobody
# else is ready, so the wall-exhausted checks pay nothing. N = 200, A = 400.
WORKED_EXAMPLE_HANDS = ("13579m2468m3579p9m", "1111234567789p", "13579s2468s1359m", "13579s2468s2468m")


def worked_example(**overrides: object) -> Table:
    table = table_with_hands(
        WORKED_EXAMPLE_HANDS,
        missing_suits="sspp",
        head_draws="5s7m8m8m9p",
        tail_draws="9p",
        rules=rules(coefficient=200, rake_beans=400, **overrides),
    )
    table.act(Discard(0, "9m"))
    table.act(Kong(1, "1p"))
    table.act(Discard(1, "5s"))
    for seat, tile in ((2, "7m"), (3, "8m"), (0, "8m")):
        table.act(Discard(seat, tile))
        pass_claims(table)
    won = table.act(Win(1))[0]
    assert isinstance(won, PlayerWon) and won.win_by == "self_draw" and not won.after_kong
    play_out(table)
    return table


@pytest.mark.parametrize(
    ("options", "points_per_loser"),
    [
        pytest.param({}, 2 + 16, id="RULES-1.9-worked-example-18-points"),
        pytest.param({"cap_points": 4}, 2 + 4, id="RULES-1.9-cap-4-limits-the-win-not-the-kong"),
        pytest.param({"self_draw_bonus": "add_one"}, 2 + 8 + 1, id="RULES-1.7-add-one-instead-of-x2"),
        pytest.param(
            {"self_draw_bonus": "add_one", "cap_points": 4}, 2 + 4 + 1, id="RULES-1.7-add-one-after-the-cap"
        ),
    ],
)
def test_1_6_self_draw_every_other_player_pays_then_the_rake(
    options: dict[str, object], points_per_loser: int
) -> None:
    money = settle_and_post(worked_example(**options).events, starting(10_000, 10_000, 10_000, 10_000))
    loser = -points_per_loser * 200 - 400
    assert money.deltas() == deltas(
        p0=loser, p1=3 * points_per_loser * 200 - 400, p2=loser, p3=loser, rake=1_600
    )
    win_lines = [line for line in money.lines() if line[0] == "win"]
    assert [payer for _, payer, _ in win_lines] == ["p2", "p3", "p0"]  # one instruction per loser


def test_1_9_worked_example_each_loser_minus_3600_minus_400_winner_plus_10800_minus_400_house_1600() -> None:
    money = settle_and_post(worked_example().events, starting(10_000, 10_000, 10_000, 10_000))
    assert money.deltas() == {
        "p0": -3_600 - 400,
        "p1": 10_800 - 400,
        "p2": -3_600 - 400,
        "p3": -3_600 - 400,
        "house:rake": 1_600,
        "house:escape": 0,
    }
    settled = money.game_settled()
    assert settled is not None
    assert {player.account: player.beans - player.rake_beans for player in settled.players} == {
        "player:p0": -4_000,
        "player:p1": 10_400,
        "player:p2": -4_000,
        "player:p3": -4_000,
    }


def test_1_9_rake_is_capped_by_balance_after_three_wins_end_the_game() -> None:
    table = table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="ssmm", rules=rules(rake_beans=300))
    table.act(Discard(0, "5p"))
    table.act(Win(1))
    table.act(Win(3))
    ended = table.act(Win(2))
    assert isinstance(ended[-1], GameEnded) and ended[-1].reason == "three_wins"
    money = settle_and_post(table.events, starting(250, 30_000, 100, 0))
    # Seat 0 owes 100 to each winner but holds 250: 100, 100, then 50 to seat 2. Rake 300 each,
    # capped: seat 0 has 0 left, seat 1 pays 300, seat 2 (150) pays 150, seat 3 (100) pays 100.
    assert money.deltas() == deltas(p0=-250, p1=100 - 300, p2=50 - 150, p3=100 - 100, rake=550)
    assert money.book.balance("player:p0") == 0


# --------------------------------------------------------------------------- wall exhausted (1.8)

# Seat 0 (dealer) konges 1111s at once and ends not ready; seat 1 is ready (7m: 清七对 16; 1m, 4m:
# 清一色 4); seat 2 is not ready; seat 3 holds three suits and only ever draws p (its missing suit),
# so it is a flower pig at the end.
FLOWER_PIG_HANDS = ("1111s2468s1357m9m9s", "1122334455667m", "2468m3579s3579s1m", "89m1234p4566888s")


def flower_pig_game() -> Table:
    head_draws = draws_keeping_a_flower_pig(
        FLOWER_PIG_HANDS, "9p", pig_seat=3, pig_missing_suit="p", first_seat=1
    )
    table = table_with_hands(
        FLOWER_PIG_HANDS, missing_suits="pspp", head_draws=head_draws, tail_draws="9p", rules=rules()
    )
    table.act(Kong(0, "1s"))
    table.act(Discard(0, "9p"))
    play_out(table)
    ended = table.events[-1]
    assert isinstance(ended, GameEnded) and ended.reason == "wall_exhausted"
    assert [hand.concealed for hand in ended.hands][1:] == [
        tuple(tile_code(tile) for tile in sorted(parse_tiles(hand))) for hand in FLOWER_PIG_HANDS[1:]
    ], "every hand but the kong player's is as dealt"
    return table


def test_1_8_flower_pig_then_not_ready_then_kong_refund() -> None:
    money = settle_and_post(flower_pig_game().events, RICH)
    assert money.lines() == [
        ("concealed_kong", "p1", (("p0", 200),)),
        ("concealed_kong", "p2", (("p0", 200),)),
        ("concealed_kong", "p3", (("p0", 200),)),
        ("flower_pig", "p3", (("p0", 1_600), ("p1", 1_600), ("p2", 1_600))),
        ("not_ready", "p0", (("p1", 1_600),)),  # seat 1's best wait, 清七对 16
        ("not_ready", "p2", (("p1", 1_600),)),
        # RULES.md 1.9a.2: each refund to one original payer is its own instruction.
        ("kong_refund", "p0", (("p1", 200),)),
        ("kong_refund", "p0", (("p2", 200),)),
        ("kong_refund", "p0", (("p3", 200),)),
    ]
    # p0: +600 kong +1600 pig −1600 not ready −600 refund; p1: −200 +1600 +1600 +1600 +200.
    assert money.deltas() == deltas(p0=0, p1=4_800, p2=0, p3=-4_800)


def test_1_9_a_short_payer_pays_what_it_has_pro_rata_remainder_to_the_next_seat() -> None:
    money = settle_and_post(flower_pig_game().events, starting(30_000, 30_000, 30_000, 1_000))
    # The pig has 1,000 − 200 (kong) = 800 for 4,800 owed: 800 × 1600/4800 = 266 each, the
    # remainder 2 to seat 0, first in turn order after seat 3. The kong refund gives it 200 back.
    assert money.deltas() == deltas(
        p0=600 + 268 - 1_600 - 600,
        p1=-200 + 266 + 1_600 + 1_600 + 200,
        p2=-200 + 266 - 1_600 + 200,
        p3=-200 - 800 + 200,
    )
    pig = next(transfer for transfer in money.transfers if transfer.reason == "flower_pig")
    assert (pig.requested_beans, pig.posted_beans) == (4_800, 800)


# Seat 1 konges the dealer's 5p (exposed), discards the replacement 6s, seat 2 wins on it: the
# kong's income is transferred. Later seat 1 konges 1111m (concealed, paid by seats 3 and 0) and
# ends not ready: it refunds the concealed kong only.
TRANSFER_REFUND_HANDS = ("1235p1112223344s", "555p111m2468m139p", "678p789p45678s99s", "2345678999m234p")


def test_1_8_kong_refund_skips_a_kong_moved_by_call_transfer() -> None:
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
    money = settle_and_post(table.events, RICH)
    assert money.lines() == [
        ("exposed_kong", "p0", (("p1", 200),)),
        ("win", "p1", (("p2", 200),)),
        ("call_transfer", "p1", (("p2", 200),)),
        ("concealed_kong", "p3", (("p1", 200),)),
        ("concealed_kong", "p0", (("p1", 200),)),
        # Seat 3 waits ×1 at best; seat 0 (123p 111222s 3344s) ×2 on 2s (a 根).
        ("not_ready", "p1", (("p3", 100), ("p0", 200))),
        ("kong_refund", "p1", (("p3", 200),)),
        ("kong_refund", "p1", (("p0", 200),)),
    ]
    assert money.deltas() == deltas(p0=0, p1=-500, p2=400, p3=100)


# ------------------------------------------------------------------------------------ escape (1.10)


def escape_of_a_non_winner() -> Table:
    table = table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="ssmm", rules=rules())
    table.act(Discard(0, "7m"))  # nobody can use 7m: seat 1 draws
    table.act(Leave(0))
    return table


def test_1_10_escape_of_a_non_winner_with_enough_beans_pays_penalty_and_compensations() -> None:
    money = settle_and_post(escape_of_a_non_winner().events, RICH)
    # Penalty max(16, 64 × 3 others in game) = 192; compensation max(4, owed 0 or 1) = 4 each.
    assert money.lines() == [
        (
            "escape_penalty",
            "p0",
            (("house:escape", 19_200), ("p1", 400), ("p2", 400), ("p3", 400)),
        )
    ]
    assert money.deltas() == deltas(p0=-20_400, p1=400, p2=400, p3=400, escape=19_200)


def test_1_10_escape_of_a_non_winner_without_enough_beans_is_split_penalty_first() -> None:
    money = settle_and_post(escape_of_a_non_winner().events, starting(1_000, 0, 0, 0))
    # B = 1,000 < T = 20,400: penalty floor(1000 × 19200 / 20400) = 941; the other 59 split
    # 1:1:1 = 19 each, rounded down; the remainder 2 goes to the house: 943.
    assert money.deltas() == deltas(p0=-1_000, p1=19, p2=19, p3=19, escape=943)


def test_1_10_escape_of_a_winner_costs_nothing() -> None:
    table = table_with_hands(TRIPLE_WAIT_HANDS, missing_suits="ssmm", rules=rules())
    table.act(Discard(0, "5p"))
    table.act(Win(1))
    pass_claims(table)
    table.act(Leave(1))
    money = settle_and_post(table.events, RICH)
    assert money.lines() == [("win", "p0", (("p1", 100),))]
    assert money.deltas() == deltas(p0=-100, p1=100)


def deltas(
    *, p0: int = 0, p1: int = 0, p2: int = 0, p3: int = 0, rake: int = 0, escape: int = 0
) -> dict[str, int]:
    return {"p0": p0, "p1": p1, "p2": p2, "p3": p3, "house:rake": rake, "house:escape": escape}
