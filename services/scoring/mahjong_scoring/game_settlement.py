"""One game's settlement as a pure fold: table events in, settlement events out.

`settle_table_event(state, envelope)` runs the table event through `game_facts` (scoring's own
view of the game), feeds the resulting facts to the rules' settlement fold
(`mahjong_rules.settlement.settle`), converts every instruction into beans once (points × N,
RULES.md 0), and wraps each in a `SettlementInstructed` envelope; at `GameEnded` it adds the rake
of every seated player (RULES.md 1.9) and `GameSettled` with the game's totals.

Everything an output carries is derived from the input events, never from a clock or a random
generator: the instruction id is a UUID 5 of the table id and the settlement package's own
instruction key (source event, reason, kong referred to, payer and payees), the occurrence time is
the source event's. Replaying the same table events therefore gives byte-identical settlement
events, which is what makes a rebuild comparable with the live projection and lets the ledger use
the instruction id as its idempotency key.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from mahjong.v1 import common_pb2, envelope_pb2, settlement_events_pb2
from mahjong_platform.envelopes import new_envelope
from mahjong_rules.settlement import (
    SEAT_COUNT,
    BeanInstruction,
    Instruction,
    Party,
    SettlementState,
    new_game,
    rake_instructions,
    settle,
    to_beans,
)

from mahjong_scoring.game_facts import (
    FactStep,
    FanLine,
    GameFactsState,
    GameOpened,
    GameOver,
    InstructionsStep,
    Notice,
    ScoredFans,
    apply_table_event,
    evolve,
    new_game_facts,
)

INSTRUCTION_NAMESPACE: Final = uuid.UUID("5d1f3b0e-8a7c-5b43-9e51-6c2f0d4a9b17")
"""Namespace of the UUID 5 instruction and settlement event ids (fixed forever: ids must not change)."""

# A game has at most a few dozen instructions; far more means a broken stream or a bug.
GAME_LINES_MAX: Final = 1_000


@dataclass(frozen=True)
class PlayerTotal:
    """One seat's totals so far: signed points and beans over every line, and the rake in beans."""

    points: int = 0
    beans: int = 0
    rake_beans: int = 0


@dataclass(frozen=True)
class GameSettlementState:
    """What scoring remembers of one game: its facts, the settlement fold, lines and totals."""

    facts: GameFactsState
    settlement: SettlementState | None = None
    line_count: int = 0
    totals: tuple[PlayerTotal, ...] = (PlayerTotal(),) * SEAT_COUNT
    settled: bool = False

    @property
    def opened(self) -> GameOpened | None:
        """The game's opening, once `TableOpened` was seen."""
        return self.facts.opened


@dataclass(frozen=True)
class SettlementOutput:
    """What one table event caused: settlement events to append (in order), and notices to log."""

    envelopes: tuple[envelope_pb2.Envelope, ...] = ()
    notices: tuple[Notice, ...] = ()

    @property
    def instructions(self) -> tuple[settlement_events_pb2.SettlementInstructed, ...]:
        """The `SettlementInstructed` payloads among the envelopes."""
        return tuple(
            envelope.settlement_instructed
            for envelope in self.envelopes
            if envelope.WhichOneof("payload") == "settlement_instructed"
        )


def new_game_settlement() -> GameSettlementState:
    """The state before a game's first event."""
    return GameSettlementState(facts=new_game_facts())


def settle_table_event(
    state: GameSettlementState, envelope: envelope_pb2.Envelope
) -> tuple[GameSettlementState, SettlementOutput]:
    """Apply one table event: the new state and the settlement events it causes.

    An event applied before causes nothing. Raises `game_facts.GameFactsError` or the settlement
    package's `InvalidSettlementFactError` for an event that contradicts the game so far.
    """
    facts, steps = apply_table_event(state.facts, envelope)
    state = evolve(state, facts=facts)
    if not steps:  # most events (draws, discards, passes): nothing to settle
        return state, _NOTHING_CAUSED
    envelopes: list[envelope_pb2.Envelope] = []
    notices: list[Notice] = []
    for step in steps:
        if isinstance(step, Notice):
            notices.append(step)
        elif isinstance(step, GameOpened):
            state = evolve(state, settlement=new_game(step.options))
        elif isinstance(step, FactStep):
            state = _settle_fact(state, step, envelope, envelopes)
        elif isinstance(step, InstructionsStep):
            state = _settle_instructions(state, step, envelope, envelopes)
        else:
            state = _settle_game_over(state, step, envelope, envelopes)
    return state, SettlementOutput(tuple(envelopes), tuple(notices))


_NOTHING_CAUSED: Final = SettlementOutput()


def settle_table_events(
    state: GameSettlementState, envelopes: Sequence[envelope_pb2.Envelope]
) -> tuple[GameSettlementState, SettlementOutput]:
    """Apply several table events in order: the final state and everything they caused."""
    outputs: list[envelope_pb2.Envelope] = []
    notices: list[Notice] = []
    for envelope in envelopes:
        state, output = settle_table_event(state, envelope)
        outputs.extend(output.envelopes)
        notices.extend(output.notices)
    return state, SettlementOutput(tuple(outputs), tuple(notices))


def instruction_id(table_id: str, instruction: BeanInstruction) -> str:
    """The instruction's id: UUID 5 of the table and the settlement package's instruction key.

    The key names the source event, reason, referred kong, payer and payees, so two instructions of
    one game never share it (asserted when a line is added) and a replay reproduces it exactly.
    """
    return instruction_id_of_key(table_id, instruction.instruction_id)


def instruction_id_of_key(table_id: str, key: str) -> str:
    """The instruction id of a settlement package instruction key (see `instruction_id`)."""
    return str(uuid.uuid5(INSTRUCTION_NAMESPACE, f"{table_id}|{key}"))


def game_settled_event_id(table_id: str, source: str) -> str:
    """The id of a game's `GameSettled` event, derived from its `GameEnded` event."""
    return str(uuid.uuid5(INSTRUCTION_NAMESPACE, f"{table_id}|game_settled|{source}"))


def _settle_fact(
    state: GameSettlementState,
    step: FactStep,
    source: envelope_pb2.Envelope,
    envelopes: list[envelope_pb2.Envelope],
) -> GameSettlementState:
    assert state.settlement is not None, "facts only follow the opening of a settled game"
    opened = state.opened
    assert opened is not None
    settlement, instructions = settle(state.settlement, step.fact)
    state = evolve(state, settlement=settlement)
    for instruction in instructions:
        fans = _fans_of_instruction(instruction, step)
        state = _add_line(state, to_beans(instruction, opened.options), fans, source, envelopes)
    return state


def _settle_instructions(
    state: GameSettlementState,
    step: InstructionsStep,
    source: envelope_pb2.Envelope,
    envelopes: list[envelope_pb2.Envelope],
) -> GameSettlementState:
    """Formula (RULES.md 2.3): instructions already in points; converted once into beans."""
    opened = state.opened
    assert opened is not None
    for instruction in step.instructions:
        fans = _fans_of_instruction(instruction, step)
        state = _add_line(state, to_beans(instruction, opened.options), fans, source, envelopes)
    return state


def _fans_of_instruction(instruction: Instruction, step: FactStep | InstructionsStep) -> ScoredFans | None:
    """The fans behind an instruction: the winner's hand (win), or the one ready payee's best wait
    (not ready). An instruction with several payees carries none: `Payee` has no fans field."""
    if instruction.reason.value not in ("win", "not_ready") or len(instruction.payments) != 1:
        return None
    payee = instruction.payments[0].payee
    return step.fans_of(payee) if isinstance(payee, int) else None


def _settle_game_over(
    state: GameSettlementState,
    step: GameOver,
    source: envelope_pb2.Envelope,
    envelopes: list[envelope_pb2.Envelope],
) -> GameSettlementState:
    opened = state.opened
    assert opened is not None
    for rake in rake_instructions(opened.options, step.source, range(SEAT_COUNT)):
        state = _add_line(state, rake, None, source, envelopes)
    game_settled = settlement_events_pb2.GameSettled(
        table_id=opened.table_id,
        room_id=opened.room_id,
        players=[
            settlement_events_pb2.PlayerSettlement(
                account=opened.accounts[seat],
                seat=seat,
                points=total.points,
                beans=total.beans,
                rake_beans=total.rake_beans,
            )
            for seat, total in enumerate(state.totals)
        ],
        instruction_count=state.line_count,
    )
    envelopes.append(
        _envelope(game_settled, game_settled_event_id(opened.table_id, step.source), opened.table_id, source)
    )
    return evolve(state, settled=True)


def _add_line(
    state: GameSettlementState,
    instruction: BeanInstruction,
    fans: ScoredFans | None,
    source: envelope_pb2.Envelope,
    envelopes: list[envelope_pb2.Envelope],
) -> GameSettlementState:
    opened = state.opened
    assert opened is not None
    line = state.line_count + 1
    assert line <= GAME_LINES_MAX, f"table {opened.table_id} has more than {GAME_LINES_MAX} settlement lines"
    points = _points_of(instruction, opened.options.coefficient)
    main_reason = instruction.reason.value
    message = settlement_events_pb2.SettlementInstructed(
        instruction_id=instruction_id(opened.table_id, instruction),
        table_id=opened.table_id,
        room_id=opened.room_id,
        reason=main_reason,
        payer_account=_account(opened, instruction.payer),
        payer_seat=_seat(instruction.payer),
        payees=[
            settlement_events_pb2.Payee(
                account=_account(opened, payment.payee),
                points=payment_points,
                beans=payment.beans,
                reason="" if payment.reason.value == main_reason else payment.reason.value,
                seat=_seat(payment.payee),
            )
            for payment, payment_points in zip(instruction.payments, points, strict=True)
        ],
        source_event_id=instruction.source,
        fans=[] if fans is None else [_fan_message(fan) for fan in fans.fans],
        multiplier=0 if fans is None else fans.multiplier,
        coefficient=opened.options.coefficient,
        line=line,
        # RULES.md 1.9a.1: a kong refund or call transfer moves at most what these paid the payer.
        income_instruction_ids=[instruction_id_of_key(opened.table_id, key) for key in instruction.income_of],
    )
    assert all(envelope.event_id != message.instruction_id for envelope in envelopes), (
        f"two instructions share the id {message.instruction_id}"
    )
    envelopes.append(_envelope(message, message.instruction_id, opened.table_id, source))
    return evolve(state, line_count=line, totals=_totals_after(state.totals, instruction, points))


def _points_of(instruction: BeanInstruction, coefficient: int) -> list[int]:
    """Each line's points: beans ÷ N, except the rake, which is in beans only (0 points)."""
    points = []
    for payment in instruction.payments:
        if payment.reason.value == "rake":
            points.append(0)
        else:
            assert payment.beans % coefficient == 0, "bean lines are points × N"
            points.append(payment.beans // coefficient)
    return points


def _totals_after(
    totals: tuple[PlayerTotal, ...], instruction: BeanInstruction, points: list[int]
) -> tuple[PlayerTotal, ...]:
    new_totals = list(totals)
    is_rake = instruction.reason.value == "rake"
    for payment, payment_points in zip(instruction.payments, points, strict=True):
        if is_rake:
            payer_total = new_totals[instruction.payer]
            new_totals[instruction.payer] = evolve(
                payer_total, rake_beans=payer_total.rake_beans + payment.beans
            )
            continue
        _adjust(new_totals, instruction.payer, -payment_points, -payment.beans)
        _adjust(new_totals, payment.payee, payment_points, payment.beans)
    return tuple(new_totals)


def _adjust(totals: list[PlayerTotal], party: Party, points: int, beans: int) -> None:
    if isinstance(party, int):
        total = totals[party]
        totals[party] = evolve(total, points=total.points + points, beans=total.beans + beans)


def _seat(party: Party) -> int | None:
    """A player's seat; None (the field left absent) for a house account."""
    return party if isinstance(party, int) else None


def _account(opened: GameOpened, party: Party) -> str:
    return opened.accounts[party] if isinstance(party, int) else party


def _fan_message(fan: FanLine) -> common_pb2.Fan:
    return common_pb2.Fan(id=fan.id, name=fan.name, multiplier=fan.multiplier, count=fan.count)


def _envelope(
    payload: settlement_events_pb2.SettlementInstructed | settlement_events_pb2.GameSettled,
    event_id: str,
    table_id: str,
    source: envelope_pb2.Envelope,
) -> envelope_pb2.Envelope:
    occurred_at = source.occurred_at.ToDatetime(tzinfo=datetime.UTC)
    return new_envelope(
        payload,
        clock=lambda: occurred_at,
        stream_id=table_id,
        event_id=event_id,
        correlation_id=source.correlation_id or table_id,
        causation_id=source.event_id,
    )
