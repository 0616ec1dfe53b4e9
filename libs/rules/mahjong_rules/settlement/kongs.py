"""Kong payments and call transfer (刮风下雨, 呼叫转移): RULES.md 1.5."""

from __future__ import annotations

from .model import (
    Instruction,
    InvalidSettlementFactError,
    KongFact,
    KongIncome,
    KongKind,
    Payment,
    Reason,
    SettlementState,
    check_seat,
    seats_after,
)

# RULES.md 1.5 table: what each payer pays the kong player, in points. Kongs are not capped:
# the cap of 1.9 limits payments "for one win or one check" only.
KONG_POINTS = {KongKind.EXPOSED: 2, KongKind.ADDED: 1, KongKind.CONCEALED: 2}
KONG_REASONS = {
    KongKind.EXPOSED: Reason.EXPOSED_KONG,
    KongKind.ADDED: Reason.ADDED_KONG,
    KongKind.CONCEALED: Reason.CONCEALED_KONG,
}


def kong_payers(state: SettlementState, fact: KongFact) -> tuple[int, ...]:
    """Who pays for a kong: the discarder (exposed), else every other player still in the game.

    RULES.md 1.5: only players not yet won pay; 1.10: escaped players take no part.
    """
    check_seat(fact.declarer, "kong declarer")
    if not state.in_game(fact.declarer):
        raise InvalidSettlementFactError(f"seat {fact.declarer} is out of the game and cannot kong")
    if fact.kind is KongKind.EXPOSED:
        if fact.discarder is None:
            raise InvalidSettlementFactError("an exposed kong names the discarder")
        check_seat(fact.discarder, "discarder")
        if fact.discarder == fact.declarer or not state.in_game(fact.discarder):
            raise InvalidSettlementFactError(f"seat {fact.discarder} cannot have discarded this tile")
        return (fact.discarder,)
    if fact.discarder is not None:
        raise InvalidSettlementFactError(f"an {fact.kind} kong is made on one's own turn: no discarder")
    return tuple(seat for seat in seats_after(fact.declarer) if state.in_game(seat))


def kong_instructions(state: SettlementState, fact: KongFact) -> tuple[Instruction, ...]:
    """The immediate payments for a kong that stands (RULES.md 1.5, settled at once).

    One instruction per payer, so that one payer's shortfall (1.9) never touches another's.
    """
    points = KONG_POINTS[fact.kind]
    reason = KONG_REASONS[fact.kind]
    return tuple(
        Instruction(payer=payer, payments=(Payment(fact.declarer, points, reason),), source=fact.source)
        for payer in kong_payers(state, fact)
    )


def kong_income(fact: KongFact, instructions: tuple[Instruction, ...]) -> KongIncome:
    """The income record of a kong, kept for call transfer (1.5) and kong refund (1.8)."""
    paid_points = tuple((instruction.payer, instruction.total_points) for instruction in instructions)
    keys = tuple(instruction.instruction_id for instruction in instructions)
    return KongIncome(
        source=fact.source, declarer=fact.declarer, paid_points=paid_points, instruction_keys=keys
    )


def call_transfer_instruction(
    kong: KongIncome, source: str, winner_seats: tuple[int, ...]
) -> Instruction | None:
    """呼叫转移 (RULES.md 1.5): the kong's income moves from the kong player to the only winner.

    `source` is the win that triggers it; with several winners (or a kong that earned nothing)
    there is nothing to move. The caller marks the kong transferred so kong refund skips it.
    The points are the kong's nominal income; `income_of` names the kong's instructions, so what
    moves is at most what the kong player actually received for them (RULES.md 1.9a.1), and the
    caller settles it right after the win (1.9a.7).
    """
    if len(winner_seats) != 1 or kong.total_points == 0:
        return None
    (winner,) = winner_seats
    assert winner != kong.declarer, "the kong player discarded, so cannot win on that discard"
    return Instruction(
        payer=kong.declarer,
        payments=(Payment(winner, kong.total_points, Reason.CALL_TRANSFER),),
        source=source,
        refers_to=kong.source,
        income_of=kong.instruction_keys,
    )
