"""Table-driven examples of the settlement rules, each citing its RULES.md section."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from mahjong_rules.settlement import (
    HOUSE_ESCAPE,
    HOUSE_RAKE,
    BeanInstruction,
    BeanPayment,
    EscapeFact,
    GameFact,
    HandFacts,
    Instruction,
    InvalidSettlementFactError,
    KongFact,
    KongKind,
    Party,
    Reason,
    SelfDrawBonus,
    SettlementOptions,
    WallExhaustedFact,
    WinBy,
    WinFact,
    Winner,
    apply_balance,
    beans_by_party,
    limit_to_income,
    new_game,
    points_by_party,
    post_in_order,
    post_instruction,
    rake_instructions,
    settle,
    settle_game,
    to_beans,
)

OPTIONS = SettlementOptions(coefficient=1, rake_beans=0)
CAP_8 = SettlementOptions(coefficient=1, rake_beans=0, cap_points=8)
ADD_ONE = SettlementOptions(coefficient=1, rake_beans=0, self_draw_bonus=SelfDrawBonus.ADD_ONE)
CAP_8_ADD_ONE = SettlementOptions(
    coefficient=1, rake_beans=0, cap_points=8, self_draw_bonus=SelfDrawBonus.ADD_ONE
)

NOT_READY = HandFacts()
PIG = HandFacts(holds_three_suits=True)


def ready(max_wait_multiplier: int) -> HandFacts:
    return HandFacts(ready=True, max_wait_multiplier=max_wait_multiplier)


def hands(*seat_hands: HandFacts) -> tuple[HandFacts, ...]:
    return tuple(seat_hands)


Line = tuple[int, Party, int, str]  # payer, payee, points, reason


def lines(instructions: Sequence[Instruction]) -> list[Line]:
    return [
        (instruction.payer, payment.payee, payment.points, str(payment.reason))
        for instruction in instructions
        for payment in instruction.payments
    ]


def kong(source: str, declarer: int, kind: str, discarder: int | None = None) -> KongFact:
    return KongFact(source, declarer, KongKind(kind), discarder)


def self_draw(source: str, winner: int, multiplier: int) -> WinFact:
    return WinFact(source, WinBy.SELF_DRAW, (Winner(winner, multiplier),))


def discard_win(
    source: str, discarder: int, *winners: tuple[int, int], after_kong: str | None = None
) -> WinFact:
    return WinFact(source, WinBy.DISCARD, tuple(Winner(*winner) for winner in winners), discarder, after_kong)


def rob(source: str, declarer: int, *winners: tuple[int, int]) -> WinFact:
    return WinFact(source, WinBy.ROB_KONG, tuple(Winner(*winner) for winner in winners), declarer)


def exhausted(*seat_hands: HandFacts) -> WallExhaustedFact:
    return WallExhaustedFact("end", tuple(seat_hands))


def escape(seat: int, *seat_hands: HandFacts, source: str = "escape") -> EscapeFact:
    return EscapeFact(source, seat, tuple(seat_hands) if seat_hands else (NOT_READY,) * 4)


@dataclass(frozen=True)
class Case:
    """Settle `before` silently, then `fact`: its instructions must be `expected`."""

    id: str
    fact: GameFact
    expected: list[Line]
    before: tuple[GameFact, ...] = ()
    options: SettlementOptions = field(default=OPTIONS)


def run(case: Case) -> list[Line]:
    state, _ = settle_game(case.options, case.before)
    _, instructions = settle(state, case.fact)
    return lines(instructions)


CASES = [
    # RULES.md 1.5: kongs and their immediate payments.
    Case(
        "1.5 exposed kong: the discarder pays 2",
        kong("k", 0, "exposed", discarder=2),
        [(2, 0, 2, "exposed_kong")],
    ),
    Case(
        "1.5 added kong: every other not-yet-won pays 1",
        kong("k", 1, "added"),
        [(2, 1, 1, "added_kong"), (3, 1, 1, "added_kong"), (0, 1, 1, "added_kong")],
    ),
    Case(
        "1.5 concealed kong: every other not-yet-won pays 2",
        kong("k", 0, "concealed"),
        [(1, 0, 2, "concealed_kong"), (2, 0, 2, "concealed_kong"), (3, 0, 2, "concealed_kong")],
    ),
    Case(
        "1.5 concealed kong: a player who already won does not pay",
        kong("k", 0, "concealed"),
        [(1, 0, 2, "concealed_kong"), (3, 0, 2, "concealed_kong")],
        before=(self_draw("w", 2, 1),),
    ),
    Case(
        "1.5 1.10 added kong: an escaped player takes no part",
        kong("k", 1, "added"),
        [(2, 1, 1, "added_kong"), (0, 1, 1, "added_kong")],
        before=(escape(3),),
    ),
    Case(
        "1.5 kong payments are not capped (1.9 caps wins and checks only)",
        kong("k", 0, "concealed"),
        [(1, 0, 2, "concealed_kong"), (2, 0, 2, "concealed_kong"), (3, 0, 2, "concealed_kong")],
        options=SettlementOptions(coefficient=1, rake_beans=0, cap_points=1),
    ),
    # RULES.md 1.6: wins.
    Case(
        "1.6 self-draw: every other not-yet-won pays the multiplier",
        self_draw("w", 0, 4),
        [(1, 0, 4, "win"), (2, 0, 4, "win"), (3, 0, 4, "win")],
    ),
    Case(
        "1.6 self-draw: players already won do not pay",
        self_draw("w", 0, 4),
        [(2, 0, 4, "win"), (3, 0, 4, "win")],
        before=(discard_win("w1", 3, (1, 2)),),
    ),
    Case(
        "1.6 1.10 self-draw: an escaped player does not pay",
        self_draw("w", 0, 4),
        [(1, 0, 4, "win"), (3, 0, 4, "win")],
        before=(escape(2),),
    ),
    Case("1.6 discard win: the discarder pays", discard_win("w", 3, (1, 8)), [(3, 1, 8, "win")]),
    Case("1.6 robbing the kong: the kong declarer pays", rob("w", 2, (0, 2)), [(2, 0, 2, "win")]),
    Case(
        "1.4 1.6 multi-win on one discard: the discarder pays each winner",
        discard_win("w", 0, (1, 2), (3, 16)),
        [(0, 1, 2, "win"), (0, 3, 16, "win")],
    ),
    Case(
        "1.5 1.6 1.9a.2 several players rob one kong: the declarer pays each, in turn order after it",
        rob("w", 1, (0, 4), (2, 2)),
        [(1, 2, 2, "win"), (1, 0, 4, "win")],
    ),
    # RULES.md 1.9 cap and 1.7 add_one: the extra point comes after the cap.
    Case(
        "1.9 cap: a discard win pays at most the cap",
        discard_win("w", 0, (1, 16)),
        [(0, 1, 8, "win")],
        options=CAP_8,
    ),
    Case(
        "1.9 cap: below the cap nothing changes",
        discard_win("w", 0, (1, 4)),
        [(0, 1, 4, "win")],
        options=CAP_8,
    ),
    Case(
        "1.9 cap: a self-draw pays at most the cap from each payer",
        self_draw("w", 2, 32),
        [(3, 2, 8, "win"), (0, 2, 8, "win"), (1, 2, 8, "win")],
        options=CAP_8,
    ),
    Case(
        "1.7 add_one: each self-draw payer pays one extra point",
        self_draw("w", 0, 4),
        [(1, 0, 5, "win"), (2, 0, 5, "win"), (3, 0, 5, "win")],
        options=ADD_ONE,
    ),
    Case(
        "1.7 1.9 add_one: the extra point comes after the cap",
        self_draw("w", 0, 16),
        [(1, 0, 9, "win"), (2, 0, 9, "win"), (3, 0, 9, "win")],
        options=CAP_8_ADD_ONE,
    ),
    Case(
        "1.7 add_one: a discard win gets no extra point",
        discard_win("w", 1, (0, 16)),
        [(1, 0, 8, "win")],
        options=CAP_8_ADD_ONE,
    ),
    # RULES.md 1.5 call transfer (呼叫转移).
    Case(
        "1.5 call transfer: one winner on the discard after a kong takes the kong's income",
        discard_win("w", 1, (2, 2), after_kong="k"),
        [(1, 2, 2, "win"), (1, 2, 6, "call_transfer")],
        before=(kong("k", 1, "concealed"),),
    ),
    Case(
        "1.5 call transfer: an exposed kong's income is the discarder's 2",
        discard_win("w", 0, (3, 1), after_kong="k"),
        [(0, 3, 1, "win"), (0, 3, 2, "call_transfer")],
        before=(kong("k", 0, "exposed", discarder=1),),
    ),
    Case(
        "1.5 call transfer: with two winners on that discard there is no transfer",
        discard_win("w", 1, (2, 2), (3, 4), after_kong="k"),
        [(1, 2, 2, "win"), (1, 3, 4, "win")],
        before=(kong("k", 1, "concealed"),),
    ),
    # RULES.md 1.8 step 1: flower pig.
    Case(
        "1.8 flower pig pays 16 to every non-pig, winners included",
        exhausted(NOT_READY, PIG, ready(2), NOT_READY),
        [
            (1, 2, 16, "flower_pig"),
            (1, 3, 16, "flower_pig"),
            (1, 0, 16, "flower_pig"),
            (3, 2, 2, "not_ready"),
        ],
        before=(self_draw("w", 0, 1),),
    ),
    Case(
        "1.8 flower pigs do not pay each other, and do not also pay not ready",
        exhausted(PIG, ready(4), PIG, NOT_READY),
        [
            (0, 1, 16, "flower_pig"),
            (0, 3, 16, "flower_pig"),
            (2, 3, 16, "flower_pig"),
            (2, 1, 16, "flower_pig"),
            (3, 1, 4, "not_ready"),
        ],
    ),
    Case(
        "1.8 1.10 flower pig: an escaped player takes no part",
        exhausted(PIG, NOT_READY, NOT_READY, NOT_READY),
        [(0, 1, 16, "flower_pig"), (0, 3, 16, "flower_pig")],
        before=(escape(2),),
    ),
    Case(
        "1.8 1.9 flower pig is a check: capped",
        exhausted(PIG, NOT_READY, NOT_READY, NOT_READY),
        [(0, 1, 8, "flower_pig"), (0, 2, 8, "flower_pig"), (0, 3, 8, "flower_pig")],
        options=CAP_8,
    ),
    Case(
        "1.8 flower pig points option",
        exhausted(PIG, NOT_READY, NOT_READY, NOT_READY),
        [(0, 1, 32, "flower_pig"), (0, 2, 32, "flower_pig"), (0, 3, 32, "flower_pig")],
        options=SettlementOptions(coefficient=1, rake_beans=0, flower_pig_points=32),
    ),
    # RULES.md 1.8 step 2: not ready.
    Case(
        "1.8 not ready pays each ready not-yet-won player that player's max wait multiplier",
        exhausted(NOT_READY, ready(4), ready(8), NOT_READY),
        [(0, 1, 4, "not_ready"), (0, 2, 8, "not_ready"), (3, 1, 4, "not_ready"), (3, 2, 8, "not_ready")],
    ),
    Case(
        "1.8 not ready: winners are neither paid nor pay",
        exhausted(NOT_READY, ready(4), ready(8), NOT_READY),
        [(0, 1, 4, "not_ready"), (3, 1, 4, "not_ready")],
        before=(discard_win("w", 0, (2, 1)),),
    ),
    Case(
        "1.8 1.9 not ready is a check: capped",
        exhausted(NOT_READY, ready(32), ready(4), ready(2)),
        [(0, 1, 8, "not_ready"), (0, 2, 4, "not_ready"), (0, 3, 2, "not_ready")],
        options=CAP_8,
    ),
    Case("1.8 everyone ready: nothing is paid", exhausted(ready(1), ready(2), ready(4), ready(8)), []),
    # RULES.md 1.8 step 3: kong refund.
    Case(
        "1.8 kong refund: a not-ready kong player returns the income, winners included",
        exhausted(NOT_READY, ready(2), NOT_READY, ready(1)),
        [
            (0, 1, 2, "not_ready"),
            (2, 1, 2, "not_ready"),
            (0, 1, 2, "kong_refund"),
            (0, 2, 2, "kong_refund"),
            (0, 3, 2, "kong_refund"),
        ],
        before=(kong("k", 0, "concealed"), self_draw("w", 3, 1)),
    ),
    Case(
        "1.8 kong refund: a flower pig refunds too",
        exhausted(NOT_READY, PIG, NOT_READY, NOT_READY),
        [
            (1, 2, 16, "flower_pig"),
            (1, 3, 16, "flower_pig"),
            (1, 0, 16, "flower_pig"),
            (1, 3, 1, "kong_refund"),
            (1, 0, 1, "kong_refund"),
        ],
        before=(discard_win("w", 0, (2, 1)), kong("k", 1, "added")),
    ),
    Case(
        "1.8 kong refund: a ready kong player keeps the income",
        exhausted(ready(4), NOT_READY, ready(2), ready(2)),
        [(1, 2, 2, "not_ready"), (1, 3, 2, "not_ready"), (1, 0, 4, "not_ready")],
        before=(kong("k", 0, "concealed"),),
    ),
    Case(
        "1.8 1.10 kong refund: nothing is returned to a player who left the table",
        exhausted(NOT_READY, NOT_READY, NOT_READY, NOT_READY),
        [(0, 1, 2, "kong_refund"), (0, 2, 2, "kong_refund")],
        before=(kong("k", 0, "concealed"), self_draw("w", 3, 1), escape(3)),
    ),
    Case(
        "1.5 1.8 kong refund skips a kong moved by call transfer",
        exhausted(NOT_READY, NOT_READY, NOT_READY, NOT_READY),
        [(0, 1, 1, "kong_refund"), (0, 3, 1, "kong_refund")],
        before=(
            kong("k1", 0, "concealed"),
            discard_win("w", 0, (2, 1), after_kong="k1"),
            kong("k2", 0, "added"),
        ),
    ),
    Case(
        "1.5 1.8 kong refund: no transfer with two winners, so the kong is refunded",
        exhausted(NOT_READY, NOT_READY, NOT_READY, NOT_READY),
        [(0, 1, 2, "kong_refund"), (0, 2, 2, "kong_refund"), (0, 3, 2, "kong_refund")],
        before=(kong("k", 0, "concealed"), discard_win("w", 0, (2, 1), (3, 1), after_kong="k")),
    ),
    Case(
        "1.5 1.8 kong refund: a winner who had konged refunds nothing",
        exhausted(NOT_READY, NOT_READY, NOT_READY, NOT_READY),
        [],
        before=(kong("k", 2, "exposed", discarder=1), self_draw("w", 2, 1)),
    ),
    Case(
        "1.10 1.8 fewer than two left after an escape: the checks among whoever remains",
        exhausted(NOT_READY, NOT_READY, ready(4), PIG),
        [(3, 0, 16, "flower_pig"), (3, 1, 16, "flower_pig")],
        before=(self_draw("a", 0, 1), self_draw("b", 1, 1), escape(2)),
    ),
    # RULES.md 1.10: escape.
    Case("1.10 escape of a winner: nothing is paid", escape(1), [], before=(self_draw("w", 1, 1),)),
    Case(
        "1.10 escape, ready, no cap: penalty max(16, 64 × u) and the compensation floor 4",
        escape(0, ready(4), NOT_READY, NOT_READY, ready(2)),
        [(0, HOUSE_ESCAPE, 192, "escape_penalty")]
        + [(0, seat, 4, "escape_compensation") for seat in (1, 2, 3)],
    ),
    Case(
        "1.10 escape: u counts only other players not yet won",
        escape(0, NOT_READY, NOT_READY, ready(8), NOT_READY),
        [
            (0, HOUSE_ESCAPE, 128, "escape_penalty"),
            (0, 1, 4, "escape_compensation"),
            (0, 2, 8, "escape_compensation"),
        ],
        before=(self_draw("w", 3, 1),),
    ),
    Case(
        "1.10 escape in a capped room: the cap replaces escape_cap_points",
        escape(1, NOT_READY, NOT_READY, NOT_READY, NOT_READY),
        [(1, HOUSE_ESCAPE, 24, "escape_penalty")]
        + [(1, seat, 4, "escape_compensation") for seat in (2, 3, 0)],
        options=CAP_8,
    ),
    Case(
        "1.10 escape: the penalty floor applies when cap × u is smaller",
        escape(0, NOT_READY, NOT_READY, NOT_READY, NOT_READY),
        [(0, HOUSE_ESCAPE, 16, "escape_penalty"), (0, 1, 4, "escape_compensation")],
        before=(discard_win("w", 0, (2, 1), (3, 1)),),
        options=CAP_8,
    ),
    Case(
        "1.10 escape of a flower pig: owed 16 to each other player",
        escape(2, NOT_READY, ready(4), PIG, NOT_READY),
        [(2, HOUSE_ESCAPE, 192, "escape_penalty")]
        + [(2, seat, 16, "escape_compensation") for seat in (3, 0, 1)],
    ),
    Case(
        "1.10 escape of a not-ready player: K × what the ready ones would get from 查大叫",
        escape(3, ready(8), NOT_READY, ready(1), NOT_READY),
        [
            (3, HOUSE_ESCAPE, 192, "escape_penalty"),
            (3, 0, 16, "escape_compensation"),
            (3, 1, 4, "escape_compensation"),
            (3, 2, 4, "escape_compensation"),
        ],
        options=SettlementOptions(coefficient=1, rake_beans=0, escape_correction=2),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_settlement_rule(case: Case) -> None:
    assert run(case) == case.expected


def test_1_5_call_transfer_marks_the_kong_transferred() -> None:
    state, _ = settle_game(OPTIONS, [kong("k", 1, "concealed"), discard_win("w", 1, (2, 2), after_kong="k")])
    assert state.kong("k").transferred


def test_1_5_call_transfer_with_two_winners_leaves_the_kong_unmarked() -> None:
    facts: list[GameFact] = [kong("k", 1, "concealed"), discard_win("w", 1, (2, 2), (3, 1), after_kong="k")]
    state, _ = settle_game(OPTIONS, facts)
    assert not state.kong("k").transferred


def test_1_9_worked_example_three_losers_of_18_points_to_one_winner() -> None:
    # Seed 001: N = 200, A = 400; each loser −3,600 − 400, the winner +10,800 − 400, house +1,600.
    options = SettlementOptions(coefficient=200, rake_beans=400)
    _, instructions = settle_game(options, [self_draw("w", 0, 18)])
    bean_instructions = [to_beans(instruction, options) for instruction in instructions]
    bean_instructions += rake_instructions(options, "game-end")
    balances: dict[Party, int] = {0: 100_000, 1: 100_000, 2: 100_000, 3: 100_000, HOUSE_RAKE: 0}
    for instruction in bean_instructions:
        posted = apply_balance(instruction, balances[instruction.payer])
        balances[instruction.payer] -= posted.total_beans
        for payment in posted.payments:
            balances[payment.payee] += payment.beans
    assert balances == {0: 110_400, 1: 96_000, 2: 96_000, 3: 96_000, HOUSE_RAKE: 1_600}
    assert points_by_party(instructions) == {0: 54, 1: -18, 2: -18, 3: -18}
    assert beans_by_party(bean_instructions) == {
        0: 10_400,
        1: -4_000,
        2: -4_000,
        3: -4_000,
        HOUSE_RAKE: 1_600,
    }


def bean(payer: int, *payments: tuple[Party, int], reason: Reason = Reason.NOT_READY) -> BeanInstruction:
    lines = tuple(
        BeanPayment(payee, beans, Reason.ESCAPE_PENALTY if payee == HOUSE_ESCAPE else reason)
        for payee, beans in payments
    )
    return BeanInstruction(payer, lines, "source")


BALANCE_CASES = [
    ("1.9 enough balance: posted as instructed", bean(0, (1, 100), (2, 50)), 150, [100, 50]),
    ("1.9 no balance: nothing moves", bean(0, (1, 100), (2, 50)), 0, [0, 0]),
    ("1.9 shortfall: pro rata, rounded down", bean(0, (1, 100), (2, 50), (3, 50)), 100, [50, 25, 25]),
    (
        "1.9 shortfall: the remainder goes to the first payee in turn order after the payer",
        bean(2, (1, 100), (3, 100), (0, 100)),
        100,
        [33, 34, 33],
    ),
    (
        "1.9 shortfall: the whole remainder goes to the first payee after the payer",
        bean(0, (1, 10), (2, 10), (3, 10)),
        8,
        [4, 2, 2],
    ),
    (
        "1.9 shortfall: a remainder beyond what the first payee is owed passes on in turn order",
        bean(3, (2, 1), (1, 1), (0, 1)),
        2,
        [0, 1, 1],
    ),
    (
        "1.9 rake capped by balance",
        BeanInstruction(1, (BeanPayment(HOUSE_RAKE, 400, Reason.RAKE),), "end"),
        250,
        [250],
    ),
    (
        "1.10 escape shortfall: penalty floor(B × P / T), compensations pro rata, remainder to the house",
        bean(0, (HOUSE_ESCAPE, 192), (1, 16), (2, 4), (3, 4)),
        100,
        # T = 216; penalty floor(100 × 192 / 216) = 88; rest 12 split 16:4:4 → 8, 2, 2.
        [88, 8, 2, 2],
    ),
    (
        "1.10 escape shortfall: rounding remainder of the compensations goes to the house",
        bean(0, (HOUSE_ESCAPE, 192), (1, 4), (2, 4), (3, 4)),
        101,
        # T = 204; penalty floor(101 × 192 / 204) = 95; rest 6 split 4:4:4 → 2, 2, 2.
        [95, 2, 2, 2],
    ),
    (
        "1.10 escape shortfall: house takes the remainder",
        bean(0, (HOUSE_ESCAPE, 16), (1, 4), (2, 4), (3, 4)),
        10,
        # T = 28; penalty floor(160 / 28) = 5; rest 5 split 1:1:1 → 1, 1, 1, remainder 2 → house.
        [7, 1, 1, 1],
    ),
]


@pytest.mark.parametrize(
    ("instruction", "balance_beans", "expected"),
    [case[1:] for case in BALANCE_CASES],
    ids=[case[0] for case in BALANCE_CASES],
)
def test_apply_balance(instruction: BeanInstruction, balance_beans: int, expected: list[int]) -> None:
    posted = apply_balance(instruction, balance_beans)
    assert [payment.beans for payment in posted.payments] == expected
    assert posted.instruction_id == instruction.instruction_id


def test_0_beans_are_points_times_the_coefficient() -> None:
    options = SettlementOptions(coefficient=250, rake_beans=0)
    _, instructions = settle_game(options, [discard_win("w", 1, (2, 8))])
    (bean_instruction,) = [to_beans(instruction, options) for instruction in instructions]
    assert bean_instruction.payments == (BeanPayment(2, 2_000, Reason.WIN),)


def test_1_9_no_rake_when_the_room_has_none() -> None:
    assert rake_instructions(OPTIONS, "end") == ()


def test_settling_the_same_fact_twice_changes_nothing() -> None:
    state, first = settle(new_game(OPTIONS), kong("k", 0, "concealed"))
    again, second = settle(state, kong("k", 0, "concealed"))
    assert first and second == () and again == state


def test_1_6_the_game_ends_when_three_players_have_won() -> None:
    state, _ = settle_game(OPTIONS, [self_draw("a", 0, 1), self_draw("b", 1, 1), discard_win("c", 3, (2, 1))])
    assert state.ended
    with pytest.raises(InvalidSettlementFactError):
        settle(state, exhausted(NOT_READY, NOT_READY, NOT_READY, NOT_READY))


INVALID_FACTS: list[tuple[str, list[GameFact]]] = [
    ("1.5 an exposed kong names its discarder", [kong("k", 0, "exposed")]),
    ("1.5 a concealed kong has no discarder", [kong("k", 0, "concealed", discarder=1)]),
    ("1.5 a winner cannot kong", [self_draw("w", 0, 1), kong("k", 0, "concealed")]),
    ("1.5 a winner cannot discard into an exposed kong", [self_draw("w", 1, 1), kong("k", 0, "exposed", 1)]),
    ("1.6 a winner cannot win again", [self_draw("w", 0, 1), self_draw("w2", 0, 1)]),
    ("1.6 a discarder cannot win on their own discard", [discard_win("w", 0, (0, 1))]),
    ("1.6 a self-draw has one winner", [WinFact("w", WinBy.SELF_DRAW, (Winner(0, 1), Winner(1, 1)))]),
    ("1.6 a win has a multiplier of at least 1", [discard_win("w", 0, (1, 0))]),
    ("1.5 call transfer needs a settled kong", [discard_win("w", 0, (1, 1), after_kong="nope")]),
    (
        "1.5 call transfer: the kong is the discarder's",
        [kong("k", 2, "concealed"), discard_win("w", 0, (1, 1), after_kong="k")],
    ),
    ("1.10 an escapee cannot escape again", [escape(1), escape(1, source="again")]),
    ("1.8 one hand fact per seat", [WallExhaustedFact("end", (NOT_READY,))]),
    ("0 seats are 0..3", [self_draw("w", 4, 1)]),
]


@pytest.mark.parametrize(
    "facts", [facts for _, facts in INVALID_FACTS], ids=[name for name, _ in INVALID_FACTS]
)
def test_facts_that_contradict_the_game_are_refused(facts: list[GameFact]) -> None:
    with pytest.raises(InvalidSettlementFactError):
        settle_game(OPTIONS, facts)


def test_1_3_a_player_holding_three_suits_cannot_be_ready() -> None:
    with pytest.raises(InvalidSettlementFactError):
        HandFacts(holds_three_suits=True, ready=True, max_wait_multiplier=1)


def room_options(self_draw_bonus: str) -> dict[str, Any]:
    # What a room catalog holds: plain strings for the options (RULES.md 3).
    return {"coefficient": 1, "rake_beans": 0, "self_draw_bonus": self_draw_bonus}


def test_options_accept_the_room_catalog_strings_and_refuse_nonsense() -> None:
    assert SettlementOptions(**room_options("add_one")).self_draw_bonus is SelfDrawBonus.ADD_ONE
    with pytest.raises(ValueError):
        SettlementOptions(coefficient=0, rake_beans=0)
    with pytest.raises(ValueError):
        SettlementOptions(**room_options("triple"))
    with pytest.raises(ValueError):
        SettlementOptions(coefficient=1, rake_beans=-1)


# --- RULES.md 1.9a -------------------------------------------------------------------------------


def test_1_9a_2_kong_refunds_are_one_instruction_per_original_payer_kongs_in_declared_order() -> None:
    facts = [kong("k1", 0, "concealed"), kong("k2", 0, "exposed", discarder=2)]
    state, _ = settle_game(OPTIONS, facts)
    _, refunds = settle(state, exhausted(NOT_READY, NOT_READY, NOT_READY, NOT_READY))
    assert [(refund.refers_to, lines([refund])) for refund in refunds] == [
        ("k1", [(0, 1, 2, "kong_refund")]),
        ("k1", [(0, 2, 2, "kong_refund")]),
        ("k1", [(0, 3, 2, "kong_refund")]),
        ("k2", [(0, 2, 2, "kong_refund")]),
    ]
    # 1.9a.1: each refund names the instruction by which that payer paid for the kong.
    assert [refund.income_of for refund in refunds[:3]] == [
        (key,) for key in state.kong("k1").instruction_keys
    ]


def test_1_9a_2_winners_of_one_discard_are_paid_in_turn_order_after_the_discarder() -> None:
    _, instructions = settle(new_game(OPTIONS), discard_win("w", 2, (1, 4), (3, 2), (0, 8)))
    assert [instruction.payments[0].payee for instruction in instructions] == [3, 0, 1]


def test_1_9a_3_and_1_9a_7_the_transfer_names_the_kong_instructions_and_follows_the_win() -> None:
    facts = [kong("k1", 1, "concealed"), kong("k2", 1, "added")]
    state, _ = settle_game(OPTIONS, facts)
    _, instructions = settle(state, discard_win("w", 1, (2, 2), after_kong="k2"))
    assert [instruction.reason for instruction in instructions] == [Reason.WIN, Reason.CALL_TRANSFER]
    transfer = instructions[1]
    assert (transfer.refers_to, transfer.total_points) == ("k2", 3)
    assert transfer.income_of == state.kong("k2").instruction_keys


def test_1_9a_5_add_one_gives_no_extra_point_to_a_fixed_value_hand() -> None:
    heavenly = WinFact("w", WinBy.SELF_DRAW, (Winner(0, 32, fixed_value=True),))
    _, instructions = settle(new_game(ADD_ONE), heavenly)
    assert lines(instructions) == [(seat, 0, 32, "win") for seat in (1, 2, 3)]
    _, instructions = settle(new_game(ADD_ONE), self_draw("w", 0, 32))
    assert lines(instructions) == [(seat, 0, 33, "win") for seat in (1, 2, 3)]


def test_1_9a_1_a_refund_or_transfer_moves_at_most_the_income_then_at_most_the_balance() -> None:
    refund = BeanInstruction(0, (BeanPayment(1, 200, Reason.KONG_REFUND),), "end", "k", ("kong-key",))
    assert limit_to_income(refund, 50).total_beans == 50
    assert limit_to_income(refund, 500).total_beans == 200
    assert post_instruction(refund, 30, 50).total_beans == 30
    unlimited = BeanInstruction(0, (BeanPayment(1, 200, Reason.WIN),), "w")
    assert limit_to_income(unlimited, 0) == unlimited


def test_1_9a_1_posting_a_game_refunds_what_a_short_kong_payer_actually_paid() -> None:
    # Seat 2 holds 50 when the concealed kong (2 points × N 100) is paid; seat 0 then refunds.
    options = SettlementOptions(coefficient=100, rake_beans=0)
    _, instructions = settle_game(options, [kong("k", 0, "concealed"), exhausted(*[NOT_READY] * 4)])
    balances: dict[Party, int] = {0: 0, 1: 1_000, 2: 50, 3: 1_000}
    posted, final = post_in_order([to_beans(instruction, options) for instruction in instructions], balances)
    assert [(instruction.reason, instruction.total_beans) for instruction in posted] == [
        (Reason.CONCEALED_KONG, 200),
        (Reason.CONCEALED_KONG, 50),
        (Reason.CONCEALED_KONG, 200),
        (Reason.KONG_REFUND, 200),
        (Reason.KONG_REFUND, 50),
        (Reason.KONG_REFUND, 200),
    ]
    assert final == balances
