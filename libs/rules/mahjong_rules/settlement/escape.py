"""Escape (逃跑): penalty to the house and compensation to the others (RULES.md 1.10)."""

from __future__ import annotations

from .checks import check_hands, flower_pig_points_owed, is_flower_pig, not_ready_points_owed
from .model import (
    HOUSE_ESCAPE,
    EscapeFact,
    HandFacts,
    Instruction,
    InvalidSettlementFactError,
    Payment,
    Reason,
    SettlementState,
    check_seat,
    seats_after,
)


def escape_owed_points(state: SettlementState, escapee: int, payee: int, hands: tuple[HandFacts, ...]) -> int:
    """owed_j of RULES.md 1.10: what the escapee would pay `payee` if the wall were exhausted now.

    Only 查花猪 and 查大叫 count (1.10 names no kong refund), each as its check computes it, capped.
    """
    if is_flower_pig(state, escapee, hands):
        return flower_pig_points_owed(state, escapee, payee, hands)
    return not_ready_points_owed(state, escapee, payee, hands)


def escape_penalty_points(state: SettlementState, escapee: int) -> int:
    """max(escape_penalty_floor, cap_for_escape × u), u = other players still in the game (1.10)."""
    options = state.options
    cap_for_escape_points = options.cap_points or options.escape_cap_points
    others_in_game = sum(1 for seat in seats_after(escapee) if state.in_game(seat))
    return max(options.escape_penalty_floor, cap_for_escape_points * others_in_game)


def escape_instruction(state: SettlementState, fact: EscapeFact) -> Instruction | None:
    """What an escapee pays, in one instruction (RULES.md 1.10); None when they had already won.

    Payees: `house:escape` (escape_penalty), then each other player still in the game in turn
    order (escape_compensation = max(escape_compensation_floor, K × owed_j)). The balance shortfall
    rule of 1.10 is applied to this instruction by `apply_balance`.
    """
    check_seat(fact.seat, "escapee")
    check_hands(fact.hands)
    if fact.seat in state.escaped:
        raise InvalidSettlementFactError(f"seat {fact.seat} has already left the table")
    if fact.seat in state.won:
        return None  # RULES.md 1.10: already won, no penalty
    options = state.options
    payments = []
    penalty_points = escape_penalty_points(state, fact.seat)
    if penalty_points > 0:  # zero only with a zero floor and nobody left to count
        payments.append(Payment(HOUSE_ESCAPE, penalty_points, Reason.ESCAPE_PENALTY))
    for payee in seats_after(fact.seat):
        if not state.in_game(payee):
            continue
        owed_points = escape_owed_points(state, fact.seat, payee, fact.hands)
        points = max(options.escape_compensation_floor, options.escape_correction * owed_points)
        if points > 0:
            payments.append(Payment(payee, points, Reason.ESCAPE_COMPENSATION))
    if not payments:
        return None
    return Instruction(payer=fact.seat, payments=tuple(payments), source=fact.source)
