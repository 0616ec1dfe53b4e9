"""The emitter both families' `decide` build a command's events with (Sichuan Bloody and formula)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from mahjong_table.core.events import TableEvent

StateT = TypeVar("StateT")


class Emitter(Generic[StateT]):
    """Collects a command's events, folding each one so later steps see the state after it (the
    follow-up steps of a command are decided on the state a replay sees)."""

    __slots__ = ("_evolve", "events", "state")

    def __init__(self, state: StateT, evolve: Callable[[StateT, TableEvent], StateT]) -> None:
        self.state = state
        self.events: list[TableEvent] = []
        self._evolve = evolve

    def emit(self, event: TableEvent) -> None:
        """Record `event` and fold it into `state`."""
        self.events.append(event)
        self.state = self._evolve(self.state, event)
