"""Beans: conversion from points, the pro-rata shortfall rule, the escape shortfall, the rake.

RULES.md 0: beans = points × N, converted once, integers. RULES.md 1.9: a payer never goes below
0 beans. RULES.md 1.10: the escape shortfall split.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from .model import (
    HOUSE_ESCAPE,
    HOUSE_RAKE,
    SEAT_COUNT,
    BeanInstruction,
    BeanPayment,
    Instruction,
    Party,
    Reason,
    SettlementOptions,
)


def to_beans(instruction: Instruction, options: SettlementOptions) -> BeanInstruction:
    """The instruction in beans: each line's points × N (RULES.md 0), the one conversion."""
    payments = tuple(
        BeanPayment(payment.payee, payment.points * options.coefficient, payment.reason)
        for payment in instruction.payments
    )
    return BeanInstruction(
        instruction.payer, payments, instruction.source, instruction.refers_to, instruction.income_of
    )


def rake_instructions(
    options: SettlementOptions, source: str, seats: Iterable[int] = range(SEAT_COUNT)
) -> tuple[BeanInstruction, ...]:
    """系统回收 (RULES.md 1.9): every seated player pays A beans to `house:rake` after the game.

    Escapees pay it too (1.10). The cap by balance is `apply_balance`'s job, as for every payment.
    """
    if options.rake_beans == 0:
        return ()
    return tuple(
        BeanInstruction(seat, (BeanPayment(HOUSE_RAKE, options.rake_beans, Reason.RAKE),), source)
        for seat in seats
    )


def _turn_order_key(payer: int, payee: Party) -> tuple[int, int]:
    # Seats first, in turn order after the payer (RULES.md 1.9); house accounts after them.
    if isinstance(payee, int):
        return (0, (payee - payer) % SEAT_COUNT)
    return (1, 0)


def _split_pro_rata(available_beans: int, owed_beans: list[int]) -> tuple[list[int], int]:
    """Split `available_beans` in proportion to `owed_beans`, rounded down; returns the remainder."""
    total_owed_beans = sum(owed_beans)
    if total_owed_beans == 0:
        return [0] * len(owed_beans), available_beans
    shares = [available_beans * owed // total_owed_beans for owed in owed_beans]
    return shares, available_beans - sum(shares)


def _posted(instruction: BeanInstruction, posted_beans: list[int]) -> BeanInstruction:
    payments = tuple(
        BeanPayment(payment.payee, beans, payment.reason)
        for payment, beans in zip(instruction.payments, posted_beans, strict=True)
    )
    return BeanInstruction(
        instruction.payer, payments, instruction.source, instruction.refers_to, instruction.income_of
    )


def _general_shortfall(instruction: BeanInstruction, balance_beans: int) -> list[int]:
    # RULES.md 1.9: split in proportion to what each was owed, rounded down, the remainder to the
    # first payee in turn order after the payer. The remainder is smaller than the number of
    # payees; should it exceed what the first payee is still owed (a payee owed very little next
    # to large ones), the rest passes on in turn order, so nobody receives more than owed.
    owed_beans = [payment.beans for payment in instruction.payments]
    shares, remainder = _split_pro_rata(balance_beans, owed_beans)
    turn_order = sorted(
        range(len(owed_beans)),
        key=lambda index: _turn_order_key(instruction.payer, instruction.payments[index].payee),
    )
    for index in turn_order:
        extra = min(remainder, owed_beans[index] - shares[index])
        shares[index] += extra
        remainder -= extra
    assert remainder == 0, "a shortfall balance always fits within what is owed"
    return shares


def _escape_shortfall(instruction: BeanInstruction, balance_beans: int) -> list[int]:
    # RULES.md 1.10: penalty = floor(B × penalty / T), the rest of B split among the compensations
    # in proportion, rounded down, the remainder to the house.
    total_beans = instruction.total_beans
    (penalty_index,) = [
        index for index, payment in enumerate(instruction.payments) if payment.payee == HOUSE_ESCAPE
    ]
    shares = [0] * len(instruction.payments)
    shares[penalty_index] = balance_beans * instruction.payments[penalty_index].beans // total_beans
    compensation_indexes = [index for index in range(len(shares)) if index != penalty_index]
    compensation_shares, remainder = _split_pro_rata(
        balance_beans - shares[penalty_index],
        [instruction.payments[index].beans for index in compensation_indexes],
    )
    for index, share in zip(compensation_indexes, compensation_shares, strict=True):
        shares[index] = share
    shares[penalty_index] += remainder
    return shares


def apply_balance(instruction: BeanInstruction, payer_balance_beans: int) -> BeanInstruction:
    """What is actually posted when the payer has `payer_balance_beans` (RULES.md 1.9, 1.10).

    Returns the instruction with the posted amounts: unchanged when the balance covers it, else
    the balance split among the payees as 1.9 says (1.10 for an escape instruction, recognised by
    its `house:escape` line). Never more than the balance, never negative, and exactly
    min(balance, owed) beans change hands: nothing is created or destroyed.
    """
    assert payer_balance_beans >= 0, f"no player balance is ever negative, got {payer_balance_beans}"
    total_beans = instruction.total_beans
    if payer_balance_beans >= total_beans:
        return instruction
    is_escape = any(payment.payee == HOUSE_ESCAPE for payment in instruction.payments)
    if is_escape:
        shares = _escape_shortfall(instruction, payer_balance_beans)
    else:
        shares = _general_shortfall(instruction, payer_balance_beans)
    posted = _posted(instruction, shares)
    assert posted.total_beans == payer_balance_beans, "the shortfall split conserves the balance"
    return posted


def limit_to_income(instruction: BeanInstruction, income_beans: int) -> BeanInstruction:
    """What a kong refund or call transfer owes once limited to the income behind it (1.9a.1).

    `income_beans` is what the payer actually received from the instructions named in
    `income_of` (as posted, after 1.9's pro-rata). The instruction owes at most that: a refund
    never returns beans that were never paid, a transfer never moves more than was received.
    With several payees (never produced by the rules, accepted for safety) the income is split
    among them as a balance would be (1.9). An instruction without `income_of` is unchanged.
    """
    assert income_beans >= 0, f"income is never negative, got {income_beans}"
    if not instruction.income_of:
        return instruction
    assert not any(payment.payee == HOUSE_ESCAPE for payment in instruction.payments)
    return apply_balance(instruction, min(income_beans, instruction.total_beans))


def post_instruction(
    instruction: BeanInstruction, payer_balance_beans: int, income_beans: int = 0
) -> BeanInstruction:
    """What is posted for one instruction (RULES.md 1.9, 1.9a.1, 1.10): first limited to the
    income behind it (kong refund, call transfer), then to the payer's balance."""
    return apply_balance(limit_to_income(instruction, income_beans), payer_balance_beans)


def received_from(posted: Mapping[str, BeanInstruction], keys: Iterable[str], payee: Party) -> int:
    """What `payee` was credited by the posted instructions of `keys` (missing keys: nothing)."""
    return sum(
        payment.beans
        for key in keys
        if key in posted
        for payment in posted[key].payments
        if payment.payee == payee
    )


def post_in_order(
    instructions: Iterable[BeanInstruction], balances: Mapping[Party, int]
) -> tuple[tuple[BeanInstruction, ...], dict[Party, int]]:
    """Post a game's bean instructions in order on `balances` (seats and house accounts): what
    each moved and the final balances. The model of the ledger's postings for one game (the
    ledger runs `post_instruction` on its own stored postings)."""
    current: dict[Party, int] = dict(balances)
    posted_by_key: dict[str, BeanInstruction] = {}
    posted_list: list[BeanInstruction] = []
    for instruction in instructions:
        income_beans = received_from(posted_by_key, instruction.income_of, instruction.payer)
        posted = post_instruction(instruction, current.get(instruction.payer, 0), income_beans)
        current[instruction.payer] = current.get(instruction.payer, 0) - posted.total_beans
        for payment in posted.payments:
            current[payment.payee] = current.get(payment.payee, 0) + payment.beans
        posted_by_key[instruction.instruction_id] = posted
        posted_list.append(posted)
    return tuple(posted_list), current


def points_by_party(instructions: Iterable[Instruction]) -> Mapping[Party, int]:
    """Each party's signed sum of points over the instructions (received minus paid)."""
    totals: defaultdict[Party, int] = defaultdict(int)
    for instruction in instructions:
        for payment in instruction.payments:
            totals[payment.payee] += payment.points
            totals[instruction.payer] -= payment.points
    assert sum(totals.values()) == 0
    return dict(totals)


def beans_by_party(instructions: Iterable[BeanInstruction]) -> Mapping[Party, int]:
    """Each party's signed sum of beans over the instructions (received minus paid)."""
    totals: defaultdict[Party, int] = defaultdict(int)
    for instruction in instructions:
        for payment in instruction.payments:
            totals[payment.payee] += payment.beans
            totals[instruction.payer] -= payment.beans
    assert sum(totals.values()) == 0
    return dict(totals)
