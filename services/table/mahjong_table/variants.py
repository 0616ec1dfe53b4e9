"""The table aggregates by room family (`RoomRules.variant`): Sichuan Bloody (`sichuan`) and
Formula (`formula`). The service calls these functions and never needs to know which one plays.

A table's family is fixed by its `TableOpened` (the rules snapshot), so folding picks the
aggregate from that first event and every later step from the state's type.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeAlias

from mahjong_rules.room_rules import VARIANT_FORMULA, RoomRules

from mahjong_table.core.commands import TableCommand
from mahjong_table.core.events import SeatAssignment, TableEvent, TableOpened
from mahjong_table.core.views import TableView
from mahjong_table.formula import decide as formula_decide
from mahjong_table.formula import evolve as formula_evolve
from mahjong_table.formula import views as formula_views
from mahjong_table.formula.state import FormulaTableState
from mahjong_table.sichuan import decide as sichuan_decide
from mahjong_table.sichuan import evolve as sichuan_evolve
from mahjong_table.sichuan import views as sichuan_views
from mahjong_table.sichuan.state import TableState

AnyTableState: TypeAlias = TableState | FormulaTableState
"""The state of a table of either family."""


def open_table(
    table_id: str, room_id: str, rules: RoomRules, seats: Sequence[str | SeatAssignment], seed: int
) -> list[TableEvent]:
    """The opening events of a table of the room's family."""
    if rules.variant == VARIANT_FORMULA:
        return formula_decide.open_formula_table(table_id, room_id, rules, seats, seed)
    return sichuan_decide.open_table(table_id, room_id, rules, seats, seed)


def evolve(state: AnyTableState | None, event: TableEvent) -> AnyTableState:
    """Fold one event with the table's aggregate (chosen by `TableOpened.rules.variant`)."""
    if state is None:
        assert isinstance(event, TableOpened), f"{type(event).__name__} before TableOpened"
        if event.rules.variant == VARIANT_FORMULA:
            return formula_evolve.evolve(None, event)
        return sichuan_evolve.evolve(None, event)
    if isinstance(state, FormulaTableState):
        return formula_evolve.evolve(state, event)
    return sichuan_evolve.evolve(state, event)


def fold(events: Iterable[TableEvent], state: AnyTableState | None = None) -> AnyTableState:
    """Fold a stream of events (from the first, or onto `state`)."""
    for event in events:
        state = evolve(state, event)
    assert state is not None, "no events to fold"
    return state


def decide(state: AnyTableState, command: TableCommand) -> list[TableEvent]:
    """The events `command` causes now (a `TableRuleError` when the rules refuse it)."""
    if isinstance(state, FormulaTableState):
        return formula_decide.decide(state, command)
    return sichuan_decide.decide(state, command)


def execute(state: AnyTableState, command: TableCommand) -> tuple[list[TableEvent], AnyTableState]:
    """`decide` plus the state after its events, folded once as they were decided (equal to
    `(events, fold(events, state))`: the caller need not fold them again)."""
    if isinstance(state, FormulaTableState):
        return formula_decide.execute(state, command)
    return sichuan_decide.execute(state, command)


def waited_on(state: AnyTableState) -> list[int]:
    """Seats whose answer (or deadline) the table waits on now."""
    if isinstance(state, FormulaTableState):
        return formula_decide.waited_on(state)
    return sichuan_decide.waited_on(state)


def view_for(state: AnyTableState, seat: int) -> TableView:
    """The seat's view of the table."""
    if isinstance(state, FormulaTableState):
        return formula_views.view_for(state, seat)
    return sichuan_views.view_for(state, seat)
