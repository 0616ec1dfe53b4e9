"""The settlement of one game as a pure fold: `settle(state, fact) -> (state, instructions)`.

The scoring service feeds the game's facts in order (kongs, wins, escapes, the wall-exhausted
checks) and gets the payment instructions out; the state remembers what later rules need: who has
won, who has escaped, and every kong's income (for call transfer and kong refund).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import TypeAlias

from .checks import wall_exhausted_instructions
from .escape import escape_instruction
from .kongs import call_transfer_instruction, kong_income, kong_instructions
from .model import (
    EscapeFact,
    GameFact,
    Instruction,
    InvalidSettlementFactError,
    KongFact,
    SettlementOptions,
    SettlementState,
    WinBy,
    WinFact,
)
from .wins import win_instructions

Settled: TypeAlias = tuple[SettlementState, tuple[Instruction, ...]]
"""The new state and the instructions a fact causes, in order."""

WINNERS_TO_END = 3  # RULES.md 1.6: the game ends when three players have won


def new_game(options: SettlementOptions) -> SettlementState:
    """The settlement state of a game that has just started: nobody won, no kongs."""
    return SettlementState(options=options)


def _settle_kong(state: SettlementState, fact: KongFact) -> Settled:
    instructions = kong_instructions(state, fact)
    return replace(state, kongs=(*state.kongs, kong_income(fact, instructions))), instructions


def _settle_win(state: SettlementState, fact: WinFact) -> Settled:
    instructions = win_instructions(state, fact)
    kongs = state.kongs
    if fact.after_kong is not None:
        if fact.win_by is not WinBy.DISCARD:
            raise InvalidSettlementFactError("call transfer follows a discard win only")
        kong = state.kong(fact.after_kong)
        if kong.declarer != fact.payer or kong.transferred:
            raise InvalidSettlementFactError(f"kong {fact.after_kong!r} is not the discarder's to transfer")
        winner_seats = tuple(winner.seat for winner in fact.winners)
        transfer = call_transfer_instruction(kong, fact.source, winner_seats)
        if transfer is not None:
            instructions = (*instructions, transfer)
        if len(winner_seats) == 1:
            # RULES.md 1.5: a transferred kong is marked so that kong refund skips it.
            kongs = tuple(
                replace(record, transferred=True) if record.source == kong.source else record
                for record in kongs
            )
    won = state.won | {winner.seat for winner in fact.winners}
    new_state = replace(state, won=won, kongs=kongs, ended=len(won) >= WINNERS_TO_END)
    return new_state, instructions


def _settle_escape(state: SettlementState, fact: EscapeFact) -> Settled:
    instruction = escape_instruction(state, fact)
    # RULES.md 1.10: from now on the escapee takes no part, winner or not.
    new_state = replace(state, escaped=state.escaped | {fact.seat})
    return new_state, () if instruction is None else (instruction,)


def settle(state: SettlementState, fact: GameFact) -> Settled:
    """Apply one game fact: the new state and the instructions it causes, in order.

    A fact whose source was already settled changes nothing (replays and duplicate deliveries are
    harmless). A fact after the game ended, or contradicting the state, raises
    `InvalidSettlementFactError`.
    """
    if fact.source in state.settled_sources:
        return state, ()
    if state.ended:
        raise InvalidSettlementFactError(f"the game has ended; {fact.source!r} cannot be settled")
    new_state: SettlementState
    instructions: tuple[Instruction, ...]
    if isinstance(fact, KongFact):
        new_state, instructions = _settle_kong(state, fact)
    elif isinstance(fact, WinFact):
        new_state, instructions = _settle_win(state, fact)
    elif isinstance(fact, EscapeFact):
        new_state, instructions = _settle_escape(state, fact)
    else:
        instructions = wall_exhausted_instructions(state, fact.source, fact.hands)
        new_state = replace(state, ended=True)
    for instruction in instructions:
        # Invariant: whoever is out of the game neither pays nor receives, except that winners
        # still receive flower pig and kong refund payments (RULES.md 1.6, 1.10).
        assert instruction.payer not in state.escaped and instruction.payer not in state.won
        assert not any(payment.payee in state.escaped for payment in instruction.payments)
    new_state = replace(new_state, settled_sources=state.settled_sources | {fact.source})
    return new_state, instructions


def settle_game(options: SettlementOptions, facts: Iterable[GameFact]) -> Settled:
    """Settle a whole game's facts in order: the final state and every instruction."""
    state = new_game(options)
    instructions: list[Instruction] = []
    for fact in facts:
        state, new_instructions = settle(state, fact)
        instructions.extend(new_instructions)
    return state, tuple(instructions)
