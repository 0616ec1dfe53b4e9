"""Win payments (RULES.md 1.6) with the cap (1.9) and the `add_one` self-draw option (1.7)."""

from __future__ import annotations

from .model import (
    SEAT_COUNT,
    Instruction,
    InvalidSettlementFactError,
    Payment,
    Reason,
    SelfDrawBonus,
    SettlementOptions,
    SettlementState,
    WinBy,
    WinFact,
    check_multiplier,
    check_seat,
    seats_after,
)


def win_payment_points(
    multiplier: int, win_by: WinBy, options: SettlementOptions, *, fixed_value: bool = False
) -> int:
    """What one payer pays one winner: multiplier × base 1 point, capped, then the self-draw bonus.

    RULES.md 1.9 caps every payment between two players for one win; with `add_one` (1.7) the
    self-draw extra point comes after the cap, so a capped self-draw pays cap + 1. 天胡 and 地胡
    (`fixed_value`) are fixed-value hands: no extra point (RULES.md 1.9a.5).
    """
    check_multiplier(multiplier, "win multiplier")
    points = options.capped_points(multiplier)
    if win_by is WinBy.SELF_DRAW and options.self_draw_bonus is SelfDrawBonus.ADD_ONE and not fixed_value:
        points += 1
    return points


def _check_win_fact(state: SettlementState, fact: WinFact) -> None:
    if not fact.winners:
        raise InvalidSettlementFactError("a win fact names at least one winner")
    seats = [winner.seat for winner in fact.winners]
    if len(set(seats)) != len(seats):
        raise InvalidSettlementFactError(f"winners repeat: {seats}")
    for seat in seats:
        check_seat(seat, "winner")
        if not state.in_game(seat):
            raise InvalidSettlementFactError(f"seat {seat} is out of the game and cannot win")
    if fact.win_by is WinBy.SELF_DRAW:
        if len(seats) != 1 or fact.payer is not None:
            raise InvalidSettlementFactError("a self-draw has one winner and no single payer")
        if fact.after_kong is not None:
            raise InvalidSettlementFactError("call transfer follows a discard win only")
        return
    if fact.payer is None:
        raise InvalidSettlementFactError(f"a {fact.win_by} win names the payer")
    check_seat(fact.payer, "payer")
    if fact.payer in seats or not state.in_game(fact.payer):
        raise InvalidSettlementFactError(f"seat {fact.payer} cannot pay for this win")
    if fact.win_by is WinBy.ROB_KONG and fact.after_kong is not None:
        raise InvalidSettlementFactError("call transfer follows a discard win only")


def win_instructions(state: SettlementState, fact: WinFact) -> tuple[Instruction, ...]:
    """The payments for a win (RULES.md 1.6), one instruction per payer and winner.

    Self-draw: every other player still in the game pays the winner. Discard: the discarder pays
    each winner (multi-win: one instruction per winner, in turn order after the discarder,
    RULES.md 1.9a.2, whatever order the wins were claimed in). Robbing a kong: the declarer pays.
    Call transfer is not included here (see `call_transfer_instruction`).
    """
    _check_win_fact(state, fact)
    instructions: list[Instruction] = []
    winners = fact.winners
    if fact.payer is not None:
        payer = fact.payer
        winners = tuple(sorted(winners, key=lambda winner: (winner.seat - payer) % SEAT_COUNT))
    for winner in winners:
        points = win_payment_points(
            winner.multiplier, fact.win_by, state.options, fixed_value=winner.fixed_value
        )
        if fact.win_by is WinBy.SELF_DRAW:
            payers = tuple(seat for seat in seats_after(winner.seat) if state.in_game(seat))
        else:
            assert fact.payer is not None
            payers = (fact.payer,)
        instructions.extend(
            Instruction(payer=payer, payments=(Payment(winner.seat, points, Reason.WIN),), source=fact.source)
            for payer in payers
        )
    return tuple(instructions)
