"""What scoring remembers of one game's table events: `GameFactsState`, a pure value.

Some fields serve both families, some one only: Sichuan Bloody needs every seat's tiles and melds
(its checks judge the hands, RULES.md 1.8) and the claim windows; Formula needs only the pending
win (paid once its bird is known) and each seat's flowers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, TypeVar

from mahjong_rules import Meld, Suit, Tile
from mahjong_rules.formula.fans import WinBy as FormulaWinBy
from mahjong_rules.settlement import SEAT_COUNT, WinBy, Winner

from mahjong_scoring.game_facts.reading import SUITED_TILE_KIND_COUNT
from mahjong_scoring.game_facts.steps import GameOpened, ScoredFans

_EMPTY_HAND: Final[tuple[int, ...]] = (0,) * SUITED_TILE_KIND_COUNT
_Value = TypeVar("_Value")


def evolve(value: _Value, **changes: Any) -> _Value:
    """`dataclasses.replace` for the fold's frozen values (`GameFactsState` and the settlement
    state, totals and pending facts around it): a copy with ``changes``, made without calling
    ``__init__``. Every table event made two or three copies of the 20-field state, and
    `dataclasses.replace` (a loop over the fields, then ``__init__`` setting each through
    ``object.__setattr__``) took about 40% of the fold; this copy of the instance dictionary takes
    a tenth of that. The value is the same: the same fields, so the same equality, hash and
    repr. For dataclasses with an instance dictionary (not ``slots``) and no ``__post_init__``;
    an unknown field name raises, as with `dataclasses.replace`.
    """
    fields = value.__dataclass_fields__  # type: ignore[attr-defined]
    if not changes.keys() <= fields.keys():  # a comparison of views: no set built when it holds
        raise TypeError(f"{type(value).__name__} has no field {sorted(changes.keys() - fields.keys())}")
    copy = object.__new__(type(value))
    copied = copy.__dict__
    copied.update(value.__dict__)
    copied.update(changes)
    return copy


@dataclass(frozen=True)
class PendingAddedKong:
    """Sichuan: an added kong declared but not yet standing (its rob window is open)."""

    source: str
    seat: int
    tile: Tile


@dataclass(frozen=True)
class PendingWins:
    """Sichuan: wins collected on one discard or one robbed kong while the claim window is open."""

    source: str
    win_by: WinBy
    payer: int
    tile: str
    after_kong: str | None
    winners: tuple[Winner, ...]
    fans_by_seat: tuple[tuple[int, ScoredFans], ...]


@dataclass(frozen=True)
class LastDiscard:
    """Sichuan: the latest discard, and the discarder's kong that came right before it (杠上炮)."""

    seat: int
    tile: str
    kong_source: str | None


@dataclass(frozen=True)
class FormulaPendingWin:
    """Formula: a win waiting for its bird (`BirdRevealed` follows `PlayerWon`, RULES.md 2.3)."""

    source: str
    winner: int
    win_by: FormulaWinBy
    payer: int | None
    total_fan: int
    fans: ScoredFans


@dataclass(frozen=True)
class GameFactsState:
    """What scoring remembers of one game's table events. Evolve with `fold.apply_table_event`."""

    # Both families.
    opened: GameOpened | None = None
    dealer_seat: int = 0
    won: frozenset[int] = frozenset()
    left: frozenset[int] = frozenset()
    over: bool = False
    applied_event_ids: frozenset[str] = frozenset()
    # Sichuan Bloody.
    concealed: tuple[tuple[int, ...], ...] = (_EMPTY_HAND,) * SEAT_COUNT
    melds: tuple[tuple[Meld, ...], ...] = ((),) * SEAT_COUNT
    missing_suits: tuple[Suit | None, ...] = (None,) * SEAT_COUNT
    pending_added_kong: PendingAddedKong | None = None
    settled_added_kongs: frozenset[tuple[int, Tile]] = frozenset()
    kong_before_discard: tuple[str | None, ...] = (None,) * SEAT_COUNT
    last_discard: LastDiscard | None = None
    pending_wins: PendingWins | None = None
    checked: bool = False
    # Formula.
    formula_win: FormulaPendingWin | None = None
    flowers: tuple[int, ...] = (0,) * SEAT_COUNT
    """Flowers each seat has set aside (RULES.md 2.1), 1 fan each once it wins (2.2)."""

    def in_game(self, seat: int) -> bool:
        """Not yet won and still at the table."""
        return seat not in self.won and seat not in self.left

    def hand_tiles(self, seat: int) -> list[Tile]:
        """Sichuan: the seat's concealed tiles as a list, in tile order."""
        return [tile for tile, count in enumerate(self.concealed[seat]) for _ in range(count)]
