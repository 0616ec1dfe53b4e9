"""The wall-exhausted checks, in order 查花猪 → 查大叫 → 退税 (RULES.md 1.8)."""

from __future__ import annotations

from .model import (
    SEAT_COUNT,
    HandFacts,
    Instruction,
    InvalidSettlementFactError,
    Payment,
    Reason,
    SettlementState,
    seats_after,
)


def check_hands(hands: tuple[HandFacts, ...]) -> None:
    """Raise `InvalidSettlementFactError` unless there is one `HandFacts` per seat."""
    if len(hands) != SEAT_COUNT:
        raise InvalidSettlementFactError(f"hand facts for {SEAT_COUNT} seats expected, got {len(hands)}")


def is_flower_pig(state: SettlementState, seat: int, hands: tuple[HandFacts, ...]) -> bool:
    """花猪: a player still in the game whose hand holds all three suits (RULES.md 1.8)."""
    return state.in_game(seat) and hands[seat].holds_three_suits


def is_ready(state: SettlementState, seat: int, hands: tuple[HandFacts, ...]) -> bool:
    """A player still in the game who is ready (听牌, RULES.md 1.8)."""
    return state.in_game(seat) and hands[seat].ready


def flower_pig_points_owed(state: SettlementState, pig: int, payee: int, hands: tuple[HandFacts, ...]) -> int:
    """What flower pig `pig` owes `payee` under 查花猪, in points (0 when nothing is owed).

    RULES.md 1.8: every player who is not a flower pig is paid, winners included; escaped players
    take no part (1.10). It is a check, so the cap of 1.9 applies.
    """
    if not is_flower_pig(state, pig, hands) or payee == pig or payee in state.escaped:
        return 0
    if is_flower_pig(state, payee, hands):
        return 0
    return state.options.capped_points(state.options.flower_pig_points)


def not_ready_points_owed(
    state: SettlementState, payer: int, payee: int, hands: tuple[HandFacts, ...]
) -> int:
    """What `payer` owes `payee` under 查大叫, in points (0 when nothing is owed).

    RULES.md 1.8: a player still in the game, not a flower pig and not ready pays each ready player
    still in the game that ready player's highest wait multiplier, capped (1.9).
    """
    if not state.in_game(payer) or is_flower_pig(state, payer, hands) or is_ready(state, payer, hands):
        return 0
    if payee == payer or not is_ready(state, payee, hands):
        return 0
    return state.options.capped_points(hands[payee].max_wait_multiplier)


def _owed_instruction(
    payer: int, owed: list[tuple[int, int]], reason: Reason, source: str
) -> Instruction | None:
    payments = tuple(Payment(payee, points, reason) for payee, points in owed if points > 0)
    return Instruction(payer=payer, payments=payments, source=source) if payments else None


def flower_pig_instructions(
    state: SettlementState, source: str, hands: tuple[HandFacts, ...]
) -> tuple[Instruction, ...]:
    """查花猪 (RULES.md 1.8 step 1): one instruction per flower pig, paying every non-pig."""
    check_hands(hands)
    instructions = []
    for pig in range(SEAT_COUNT):
        owed = [(payee, flower_pig_points_owed(state, pig, payee, hands)) for payee in seats_after(pig)]
        instruction = _owed_instruction(pig, owed, Reason.FLOWER_PIG, source)
        if instruction is not None:
            instructions.append(instruction)
    return tuple(instructions)


def not_ready_instructions(
    state: SettlementState, source: str, hands: tuple[HandFacts, ...]
) -> tuple[Instruction, ...]:
    """查大叫 (RULES.md 1.8 step 2): one instruction per player not ready, paying every ready one.

    A flower pig does not also pay 查大叫.
    """
    check_hands(hands)
    instructions = []
    for payer in range(SEAT_COUNT):
        owed = [(payee, not_ready_points_owed(state, payer, payee, hands)) for payee in seats_after(payer)]
        instruction = _owed_instruction(payer, owed, Reason.NOT_READY, source)
        if instruction is not None:
            instructions.append(instruction)
    return tuple(instructions)


def kong_refund_instructions(
    state: SettlementState, source: str, hands: tuple[HandFacts, ...]
) -> tuple[Instruction, ...]:
    """退税 (RULES.md 1.8 step 3): players still in the game and not ready return their kong income.

    Flower pigs are not ready, so they refund too. Kongs moved by call transfer (1.5) are skipped,
    and so are players who left the table (1.8, 1.10: an escapee receives nothing further).
    RULES.md 1.9a.2: each refund to one original payer is one instruction, kongs in the order
    declared (payers in turn order after the kong player). 1.9a.1: the points are what the payer
    was charged; `income_of` names the payer's kong instruction, so the refund returns at most
    what that payer actually paid.
    """
    check_hands(hands)
    instructions = []
    for kong in state.kongs:
        if kong.transferred or not state.in_game(kong.declarer) or is_ready(state, kong.declarer, hands):
            continue
        for payer, points in kong.paid_points:
            if payer in state.escaped or points == 0:
                continue
            instructions.append(
                Instruction(
                    payer=kong.declarer,
                    payments=(Payment(payer, points, Reason.KONG_REFUND),),
                    source=source,
                    refers_to=kong.source,
                    income_of=(kong.instruction_key_of(payer),),
                )
            )
    return tuple(instructions)


def wall_exhausted_instructions(
    state: SettlementState, source: str, hands: tuple[HandFacts, ...]
) -> tuple[Instruction, ...]:
    """All the RULES.md 1.8 checks in their order: flower pig, not ready, kong refund."""
    return (
        flower_pig_instructions(state, source, hands)
        + not_ready_instructions(state, source, hands)
        + kong_refund_instructions(state, source, hands)
    )
