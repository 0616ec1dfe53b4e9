"""What folding one table event gives: the `Step`s, in order, and the error for a broken stream.

- `GameOpened` (from `TableOpened`): the room's settlement options (beans = points × N) and the
  account of every seat, for either family;
- `FactStep`: Sichuan Bloody (RULES.md 1.5-1.10): a settlement fact for
  `mahjong_rules.settlement.settle` (kong, win, escape, wall-exhausted checks) with the fans behind
  the points of each payee;
- `InstructionsStep`: Formula (RULES.md 2.3): instructions in points already computed by
  `mahjong_rules.formula.scoring` (a win after its bird, or an escape), with the winner's fans;
- `GameOver` (from `GameEnded`): time for the rake and the game's totals;
- `Notice`: something looked wrong but settlement went on (the caller logs it; nothing here does
  I/O).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

from mahjong_rules import Fan, Tile
from mahjong_rules.formula.scoring import FormulaOptions
from mahjong_rules.settlement import GameFact, Instruction, SettlementOptions


class GameFactsError(ValueError):
    """A table event contradicts what scoring knows of the game (a broken or reordered stream)."""


@dataclass(frozen=True)
class FanLine:
    """One fan behind a payee's points. Sichuan fans multiply (`multiplier`, count 1); formula
    fans add (`multiplier` holds the fan value, counted `count` times)."""

    id: str
    name: str
    multiplier: int
    count: int = 1


def fan_lines(fans: Sequence[Fan]) -> tuple[FanLine, ...]:
    """Sichuan fans (multipliers, each counted once) as fan lines."""
    return tuple(FanLine(fan.id, fan.name, fan.multiplier) for fan in fans)


@dataclass(frozen=True)
class ScoredFans:
    """The figure and fans behind one payee's points: a Sichuan multiplier (a winner's hand, a
    ready player's best wait) or a Formula fan total (a winner's hand)."""

    multiplier: int
    fans: tuple[FanLine, ...]


@dataclass(frozen=True)
class GameOpened:
    """The game opened: its room, settlement options and the account of each seat ("player:<id>").

    `options` convert points into beans and give the rake, for both families; a formula room also
    has `formula` (its win and escape options, RULES.md 2.3) and the `wildcard` turned up at the
    opening (财神, RULES.md 2.1, None when the room plays without one).
    """

    source: str
    table_id: str
    room_id: str
    options: SettlementOptions
    accounts: tuple[str, ...]
    formula: FormulaOptions | None = None
    wildcard: Tile | None = None


@dataclass(frozen=True)
class FactStep:
    """Sichuan Bloody: a fact for the settlement fold, with the fans behind each payee seat's points."""

    fact: GameFact
    fans_by_seat: tuple[tuple[int, ScoredFans], ...] = ()

    def fans_of(self, seat: int) -> ScoredFans | None:
        """The fans behind `seat`'s points in this fact, if any."""
        return _fans_of(self.fans_by_seat, seat)


@dataclass(frozen=True)
class InstructionsStep:
    """Formula (RULES.md 2.3): instructions in points already computed by
    `mahjong_rules.formula.scoring` (a win after its bird, or an escape), with the winner's fans."""

    instructions: tuple[Instruction, ...]
    fans_by_seat: tuple[tuple[int, ScoredFans], ...] = ()

    def fans_of(self, seat: int) -> ScoredFans | None:
        """The fans behind `seat`'s points, if any."""
        return _fans_of(self.fans_by_seat, seat)


@dataclass(frozen=True)
class GameOver:
    """The game ended (`GameEnded`): the rake and the totals follow."""

    source: str
    reason: str


@dataclass(frozen=True)
class Notice:
    """A discrepancy between the table's event and scoring's own view; settlement went on."""

    source: str
    message: str


Step: TypeAlias = GameOpened | FactStep | InstructionsStep | GameOver | Notice


def _fans_of(fans_by_seat: tuple[tuple[int, ScoredFans], ...], seat: int) -> ScoredFans | None:
    return next((fans for payee, fans in fans_by_seat if payee == seat), None)
