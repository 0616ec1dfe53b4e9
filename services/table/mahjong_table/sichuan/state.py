"""The table's state: derived only by folding events (`evolve`), never mutated in place.

Hands are 27 tile counts (index = rules-library tile int) because every question the aggregate
asks (do you hold it, can you pong, do you still hold your missing suit) is a count lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from mahjong_table.core.events import EXPOSURE_ADDED, NO_SEAT
from mahjong_table.core.room_rules import RoomRules

SEAT_COUNT = 4
TILE_KIND_COUNT = 27
WALL_TILE_COUNT = 108
EMPTY_COUNTS: tuple[int, ...] = (0,) * TILE_KIND_COUNT

_Frozen = TypeVar("_Frozen")
"""A frozen slotted dataclass of either family's state (`replaced` copies its slots)."""


MEMO = {"memo": True}
"""Metadata of a field holding a memo of values derived from the other fields (waits, a view's
tile codes): computed on first use, never compared or shown, and empty again in every copy that
`replaced` makes, so it can never describe other facts than its own value's."""


class _Seated(Protocol):
    @property
    def in_game(self) -> bool: ...


class SeatsInTurnOrder:
    """Seat questions both families' table states answer the same way (a mixin: the state
    dataclass provides `players`)."""

    __slots__ = ()
    players: tuple[_Seated, ...]

    def seats_in_game(self) -> list[int]:
        """Seats neither won nor left, in seat order."""
        return [seat for seat, player in enumerate(self.players) if player.in_game]

    def next_seat_in_game(self, after_seat: int) -> int:
        """The first seat after `after_seat` in turn order that is still in the game, or -1."""
        for offset in range(1, SEAT_COUNT + 1):
            seat = (after_seat + offset) % SEAT_COUNT
            if self.players[seat].in_game:
                return seat
        return NO_SEAT


class Phase(StrEnum):
    """Where the game is. CLAIM covers the window on a discard and on an added kong."""

    DEALING = "dealing"
    EXCHANGE = "exchange"
    MISSING_SUIT = "missing_suit"
    TURN = "turn"
    CLAIM = "claim"
    ENDED = "ended"


class WindowKind(StrEnum):
    """What the open claim window is about."""

    DISCARD = "discard"
    ROB_KONG = "rob_kong"


class WindowStage(StrEnum):
    """Claims are asked in two stages so that wins beat pong/kong without hidden answers: first
    every player who can win answers win or pass; only if nobody won is the one player who can
    pong or kong asked (RULES.md 1.4)."""

    WIN = "win"
    MELD = "meld"


@dataclass(frozen=True, slots=True)
class MeldState:
    """A meld on the table: kind "pong" or "kong", exposure for kongs, source seat or -1."""

    kind: str
    tile: int
    exposure: str = ""
    from_seat: int = NO_SEAT

    @property
    def size(self) -> int:
        """Tiles in the meld: 3 or 4."""
        return 4 if self.kind == "kong" else 3


@dataclass(frozen=True, slots=True)
class PlayerState:
    """One seat's facts."""

    player_id: str
    concealed: tuple[int, ...] = EMPTY_COUNTS
    melds: tuple[MeldState, ...] = ()
    discards: tuple[int, ...] = ()
    exchange_pick: tuple[int, ...] | None = None
    missing_suit: int | None = None
    won: bool = False
    win_order: int = 0
    left: bool = False
    skip_win_multiplier: int = 0
    """Skip-win lock (RULES.md 1.4): the highest multiplier passed since the last own draw; 0 none."""
    draw_count: int = 0
    derived: dict[object, Any] = field(
        default_factory=dict, init=False, repr=False, compare=False, metadata=MEMO
    )
    """Memo of what the rules and views derive from this player's facts (`hands.waits`,
    `views`); the seat's player is replaced, never changed, so the memo stays true."""

    @property
    def in_game(self) -> bool:
        """Still playing: neither won nor left."""
        return not self.won and not self.left

    @property
    def tile_count(self) -> int:
        """Concealed tiles held."""
        return sum(self.concealed)

    def holds_missing_suit(self) -> bool:
        """True while a tile of the declared missing suit is held (RULES.md 1.3)."""
        if self.missing_suit is None:
            return False
        start = self.missing_suit * 9
        return any(self.concealed[start : start + 9])


@dataclass(frozen=True, slots=True)
class ClaimWindow:
    """The open window on a discard or an added kong (RULES.md 1.4, 1.5)."""

    kind: WindowKind
    tile: int
    from_seat: int
    stage: WindowStage
    pending: frozenset[int]
    win_offers: tuple[int, ...]
    """Per seat: the multiplier of the win offered on this tile, 0 when none is offered."""
    meld_seat: int = NO_SEAT
    can_kong: bool = False
    winners: tuple[int, ...] = ()
    after_kong: bool = False
    """The discard was made right after the discarder's kong (杠上炮, RULES.md 1.5)."""


@dataclass(frozen=True, slots=True)
class TableState(SeatsInTurnOrder):
    """Everything the aggregate knows about one table's game."""

    table_id: str
    room_id: str
    rules: RoomRules
    dealer_seat: int
    exchange_direction: str
    wall: tuple[int, ...]
    players: tuple[PlayerState, ...]
    dice_roller_seat: int = 0
    die_1: int = 1
    die_2: int = 1
    wall_head: int = 0
    """Index of the next head draw."""
    wall_tail: int = WALL_TILE_COUNT
    """One past the index of the next tail draw: the wall is `wall[wall_head:wall_tail]`."""
    phase: Phase = Phase.DEALING
    turn_seat: int = NO_SEAT
    drawn_tile: int | None = None
    turn_after_pong: bool = False
    turn_after_kong: bool = False
    window: ClaimWindow | None = None
    discard_count: int = 0
    melds_in_game: bool = False
    win_count: int = 0
    wall_exhausted: bool = False
    end_reason: str = ""
    missing_suits_public: bool = False
    version: int = 0
    """Number of events folded; the service uses it as the expected stream version."""
    hidden_counts: tuple[int, ...] = (0, 0, 0, 0)
    """Per seat, how many events so far are hidden from it (another seat's claim pass or claim
    timeout, `views.redact`): a seat's own sequence numbers skip them (`mahjong_table.visibility`)."""

    @property
    def wall_remaining(self) -> int:
        """Tiles still in the wall."""
        return self.wall_tail - self.wall_head

    @property
    def is_over(self) -> bool:
        """True once `GameEnded` was folded."""
        return self.phase is Phase.ENDED


def replaced(value: _Frozen, **changes: object) -> _Frozen:
    """`dataclasses.replace` for frozen slotted dataclasses (states, events), without `__init__`.

    The fold is the engine's hot path (every event replaces the table and a player): the copy is
    a straight-line function built once per class (`_copier`), several times faster than
    `dataclasses.replace`, and gives an equal value.
    """
    cls = type(value)
    copier = _COPIERS.get(cls) or _copier(cls)
    copy: _Frozen = copier(value)
    for name, new in changes.items():
        object.__setattr__(copy, name, new)
    return copy


def stamped(fresh: _Frozen, **changes: object) -> _Frozen:
    """Set fields of a value the caller has just built and nobody else holds yet (a fold finishing
    the state it returns), saving a second copy. Never call it on a value that was handed out."""
    for name, new in changes.items():
        object.__setattr__(fresh, name, new)
    return fresh


_COPIERS: dict[type, Callable[[Any], Any]] = {}


def _copier(cls: type) -> Callable[[Any], Any]:
    """A function copying every slot of a `cls` value, one line per slot: each slot is set through
    its own descriptor (no loop, no lookup by name), as `dataclasses` builds `__init__`. A memo
    field (`memo_field`) starts empty."""
    slots: tuple[str, ...] = cls.__slots__  # type: ignore[attr-defined]  # slotted dataclasses only
    memos = {item.name for item in fields(cls) if item.metadata.get("memo")}
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_empty_memo": dict}
    lines = ["def copy_of(value):", "    copy = _new(_cls)"]
    for index, name in enumerate(slots):
        namespace[f"_set_{index}"] = getattr(cls, name).__set__
        source = "_empty_memo()" if name in memos else f"value.{name}"
        lines.append(f"    _set_{index}(copy, {source})")
    lines.append("    return copy")
    exec("\n".join(lines), namespace)  # source built above from the class's own slot names
    copier: Callable[[Any], Any] = namespace["copy_of"]
    _COPIERS[cls] = copier
    return copier


# --- shared by both families' folds (`domain/evolve.py`, `formula/evolve.py`) -------------------


class _MeldLike(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def tile(self) -> int: ...
    @property
    def exposure(self) -> str: ...


_Player = TypeVar("_Player")
_Meld = TypeVar("_Meld", bound=_MeldLike)


def add_count(counts: tuple[int, ...], tile: int, amount: int) -> tuple[int, ...]:
    """`counts` with `amount` more of `tile` (a fold asserts what the events guarantee: 0..4)."""
    updated = list(counts)
    updated[tile] += amount
    assert 0 <= updated[tile] <= 4, f"tile {tile} count {updated[tile]} out of 0..4"
    return tuple(updated)


def with_player(players: tuple[_Player, ...], seat: int, player: _Player) -> tuple[_Player, ...]:
    """`players` with `seat`'s entry replaced."""
    updated = list(players)
    updated[seat] = player
    return tuple(updated)


def pong_to_added_kong(melds: tuple[_Meld, ...], tile: int) -> tuple[_Meld, ...]:
    """The pong of `tile` becomes an added kong (RULES.md 1.5, 2.1); it keeps the seat whose
    discard made the pong, so a robbed kong can revert."""
    return tuple(
        replaced(meld, kind="kong", exposure=EXPOSURE_ADDED)
        if meld.kind == "pong" and meld.tile == tile
        else meld
        for meld in melds
    )


def added_kong_to_pong(melds: tuple[_Meld, ...], tile: int) -> tuple[_Meld, ...]:
    """A robbed added kong of `tile` is void: it is the pong it was (RULES.md 1.5, 2.2)."""
    reverted = tuple(
        replaced(meld, kind="pong", exposure="")
        if meld.kind == "kong" and meld.exposure == EXPOSURE_ADDED and meld.tile == tile
        else meld
        for meld in melds
    )
    assert reverted != melds, "KongRobbed without the added kong"
    return reverted


def hidden_from_all_but(counts: tuple[int, ...], seat: int) -> tuple[int, ...]:
    """`hidden_counts` after an event that every seat but `seat` may not see."""
    return tuple(count + (other != seat) for other, count in enumerate(counts))
