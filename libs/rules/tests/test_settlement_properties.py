"""hypothesis properties of the settlement math: random complete games and random shortfalls."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from mahjong_rules.settlement import (
    HOUSE_ESCAPE,
    HOUSE_RAKE,
    SEAT_COUNT,
    BeanInstruction,
    BeanPayment,
    EscapeFact,
    GameFact,
    HandFacts,
    Instruction,
    KongFact,
    KongKind,
    Party,
    Reason,
    SelfDrawBonus,
    SettlementOptions,
    SettlementState,
    WallExhaustedFact,
    WinBy,
    WinFact,
    Winner,
    apply_balance,
    new_game,
    points_by_party,
    post_in_order,
    rake_instructions,
    settle,
    settle_game,
    to_beans,
)

MULTIPLIERS = st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 18, 3])

options_strategy = st.builds(
    SettlementOptions,
    coefficient=st.sampled_from([1, 100, 200, 1_000]),
    rake_beans=st.sampled_from([0, 50, 400]),
    cap_points=st.sampled_from([0, 0, 8, 16, 64]),
    self_draw_bonus=st.sampled_from(list(SelfDrawBonus)),
    flower_pig_points=st.sampled_from([16, 8, 32]),
    escape_cap_points=st.sampled_from([64, 32]),
    escape_correction=st.integers(0, 3),
    escape_penalty_floor=st.integers(0, 32),
    escape_compensation_floor=st.integers(0, 8),
)

hand_strategy = st.one_of(
    st.just(HandFacts()),
    st.just(HandFacts(holds_three_suits=True)),
    st.builds(lambda multiplier: HandFacts(ready=True, max_wait_multiplier=multiplier), MULTIPLIERS),
)
hands_strategy = st.tuples(*[hand_strategy] * SEAT_COUNT)


@st.composite
def games(draw: st.DrawFn) -> tuple[SettlementOptions, list[GameFact]]:
    """A random complete game: legal kongs, wins (incl. multi-win, robbing, call transfer),
    escapes, then the RULES.md 1.8 checks unless three players won."""
    options = draw(options_strategy)
    state = new_game(options)
    facts: list[GameFact] = []
    for step in range(draw(st.integers(0, 14))):
        in_game = state.seats_in_game()
        if state.ended or len(in_game) < 2:
            break
        source = f"event-{step}"
        kind = draw(st.sampled_from(["kong", "kong", "self_draw", "discard", "rob_kong", "escape"]))
        fact: GameFact
        if kind == "kong":
            declarer = draw(st.sampled_from(in_game))
            kong_kind = draw(st.sampled_from(list(KongKind)))
            others = [seat for seat in in_game if seat != declarer]
            discarder = draw(st.sampled_from(others)) if kong_kind is KongKind.EXPOSED else None
            fact = KongFact(source, declarer, kong_kind, discarder)
        elif kind == "self_draw":
            fact = WinFact(
                source, WinBy.SELF_DRAW, (Winner(draw(st.sampled_from(in_game)), draw(MULTIPLIERS)),)
            )
        elif kind in ("discard", "rob_kong"):
            payer = draw(st.sampled_from(in_game))
            others = [seat for seat in in_game if seat != payer]
            winner_seats = draw(
                st.lists(st.sampled_from(others), min_size=1, max_size=len(others), unique=True)
            )
            winners = tuple(Winner(seat, draw(MULTIPLIERS)) for seat in winner_seats)
            own_kongs = [k.source for k in state.kongs if k.declarer == payer and not k.transferred]
            after_kong = None
            if kind == "discard" and own_kongs and draw(st.booleans()):
                after_kong = own_kongs[-1]
            fact = WinFact(source, WinBy(kind), winners, payer, after_kong)
        else:
            seats = [seat for seat in range(SEAT_COUNT) if seat not in state.escaped]
            fact = EscapeFact(source, draw(st.sampled_from(seats)), draw(hands_strategy))
        state, _ = settle(state, fact)
        facts.append(fact)
    if not state.ended:
        facts.append(WallExhaustedFact("wall-exhausted", draw(hands_strategy)))
    return options, facts


def check_sum_zero_and_distinct_ids(instructions: tuple[Instruction, ...]) -> None:
    totals = points_by_party(instructions)
    assert sum(totals.values()) == 0
    for instruction in instructions:
        assert instruction.total_points > 0
        assert instruction.payer not in [payment.payee for payment in instruction.payments]
    ids = Counter(instruction.instruction_id for instruction in instructions)
    assert all(count == 1 for count in ids.values()), ids


def check_out_of_game_players(before: SettlementState, instructions: tuple[Instruction, ...]) -> None:
    # RULES.md 1.6: a winner pays and receives nothing further except flower pig payments and kong
    # refunds; 1.10: an escapee takes no part at all.
    for instruction in instructions:
        assert before.in_game(instruction.payer)
        for payment in instruction.payments:
            if isinstance(payment.payee, int) and payment.payee in before.won:
                assert payment.reason in (Reason.FLOWER_PIG, Reason.KONG_REFUND)
            assert payment.payee not in before.escaped


def check_kong_refunds(state: SettlementState, instructions: tuple[Instruction, ...]) -> None:
    # RULES.md 1.8: a refund returns exactly what each payer paid, and skips transferred kongs.
    for instruction in instructions:
        if instruction.reason is not Reason.KONG_REFUND:
            continue
        assert instruction.refers_to is not None
        kong = state.kong(instruction.refers_to)
        assert not kong.transferred
        paid = dict(kong.paid_points)
        for payment in instruction.payments:
            assert isinstance(payment.payee, int)
            assert payment.points == paid[payment.payee]


@settings(max_examples=200, deadline=None)
@given(games())
def test_every_game_sums_to_zero_keeps_out_of_game_players_out_and_refunds_exactly(
    game: tuple[SettlementOptions, list[GameFact]],
) -> None:
    options, facts = game
    state = new_game(options)
    every_instruction: list[Instruction] = []
    for fact in facts:
        before = state
        state, instructions = settle(state, fact)
        check_out_of_game_players(before, instructions)
        every_instruction.extend(instructions)
    check_sum_zero_and_distinct_ids(tuple(every_instruction))
    check_kong_refunds(state, tuple(every_instruction))


@settings(max_examples=100, deadline=None)
@given(games())
def test_replay_and_duplicate_facts_give_the_same_instructions(
    game: tuple[SettlementOptions, list[GameFact]],
) -> None:
    options, facts = game
    live = settle_game(options, facts)
    assert settle_game(options, facts) == live
    duplicated = [fact for fact in facts for _ in range(2)]
    assert settle_game(options, duplicated) == live


@settings(max_examples=200, deadline=None)
@given(games(), st.lists(st.integers(0, 200_000), min_size=SEAT_COUNT, max_size=SEAT_COUNT))
def test_posting_a_game_never_makes_a_balance_negative_and_conserves_beans(
    game: tuple[SettlementOptions, list[GameFact]], starting_balances: list[int]
) -> None:
    options, facts = game
    _, instructions = settle_game(options, facts)
    bean_instructions = [to_beans(instruction, options) for instruction in instructions]
    bean_instructions += rake_instructions(options, "rake")
    balances: dict[Party, int] = dict(enumerate(starting_balances))
    balances.update({HOUSE_RAKE: 0, HOUSE_ESCAPE: 0})
    total_before = sum(balances.values())
    for instruction in bean_instructions:
        posted = apply_balance(instruction, balances[instruction.payer])
        balances[instruction.payer] -= posted.total_beans
        for payment in posted.payments:
            balances[payment.payee] += payment.beans
        assert balances[instruction.payer] >= 0
    assert sum(balances.values()) == total_before


@st.composite
def owed_instructions(draw: st.DrawFn, escape: bool) -> BeanInstruction:
    payer = draw(st.integers(0, SEAT_COUNT - 1))
    others = [seat for seat in range(SEAT_COUNT) if seat != payer]
    payees: list[Party] = draw(st.lists(st.sampled_from(others), min_size=0 if escape else 1, unique=True))
    reason = Reason.ESCAPE_COMPENSATION if escape else Reason.NOT_READY
    payments = [BeanPayment(payee, draw(st.integers(1, 10**7)), reason) for payee in payees]
    if escape:
        payments.insert(0, BeanPayment(HOUSE_ESCAPE, draw(st.integers(1, 10**7)), Reason.ESCAPE_PENALTY))
    return BeanInstruction(payer, tuple(payments), "source")


@settings(max_examples=300, deadline=None)
@given(owed_instructions(escape=False), st.integers(0, 4 * 10**7))
def test_1_9_pro_rata_never_overdraws_creates_or_destroys_beans(
    instruction: BeanInstruction, balance_beans: int
) -> None:
    posted = apply_balance(instruction, balance_beans)
    assert posted.total_beans == min(balance_beans, instruction.total_beans)
    for owed, paid in zip(instruction.payments, posted.payments, strict=True):
        assert owed.payee == paid.payee and owed.reason == paid.reason
        assert 0 <= paid.beans <= owed.beans
        # Rounded down, so each payee gets at least its floor share.
        assert (
            paid.beans >= min(balance_beans, instruction.total_beans) * owed.beans // instruction.total_beans
        )


@settings(max_examples=200, deadline=None)
@given(owed_instructions(escape=True), st.integers(0, 4 * 10**7))
def test_1_10_escape_shortfall_conserves_the_balance(
    instruction: BeanInstruction, balance_beans: int
) -> None:
    posted = apply_balance(instruction, balance_beans)
    total_beans = instruction.total_beans
    assert posted.total_beans == min(balance_beans, total_beans)
    assert all(payment.beans >= 0 for payment in posted.payments)
    if balance_beans < total_beans:
        penalty_beans = balance_beans * instruction.payments[0].beans // total_beans
        compensation_beans = [payment.beans for payment in posted.payments[1:]]
        # The house gets floor(B × penalty / T) plus only the rounding remainder of the compensations.
        assert penalty_beans <= posted.payments[0].beans < penalty_beans + max(1, len(compensation_beans))


@settings(max_examples=100, deadline=None)
@given(games(), st.lists(st.integers(0, 3_000), min_size=SEAT_COUNT, max_size=SEAT_COUNT))
def test_1_9a_1_no_refund_exceeds_what_was_paid_and_no_transfer_what_was_received(
    game: tuple[SettlementOptions, list[GameFact]], starting_balances: list[int]
) -> None:
    options, facts = game
    _, instructions = settle_game(options, facts)
    bean_instructions = [to_beans(instruction, options) for instruction in instructions]
    balances: dict[Party, int] = {**dict(enumerate(starting_balances)), HOUSE_RAKE: 0, HOUSE_ESCAPE: 0}
    posted, final = post_in_order(bean_instructions, balances)
    assert sum(final.values()) == sum(balances.values())
    assert all(beans >= 0 for beans in final.values())
    by_key = {instruction.instruction_id: instruction for instruction in posted}
    for owed, moved in zip(bean_instructions, posted, strict=True):
        if owed.reason is Reason.KONG_REFUND:
            # One refund to one original payer (1.9a.2) returns at most what that payer paid.
            (kong_key,) = owed.income_of
            (payment,) = moved.payments
            assert by_key[kong_key].payer == payment.payee
            assert payment.beans <= by_key[kong_key].total_beans
        if owed.reason is Reason.CALL_TRANSFER:
            received = sum(by_key[key].total_beans for key in owed.income_of)
            assert moved.total_beans <= received
            assert all(by_key[key].payments[0].payee == owed.payer for key in owed.income_of)
