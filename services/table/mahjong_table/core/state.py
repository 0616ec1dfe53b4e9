"""The kernel of both families' table states: what a state is made of and how it is copied.

A state is derived only by folding events (`evolve`), never mutated in place: every fold step
copies the values it changes (`replaced`). Hands are tile counts indexed by the rules library's
tile ints (27 kinds in Sichuan, 42 in Formula), because every question the aggregate asks (do you
hold it, can you pong) is a count lookup. The family states (`mahjong_table.sichuan.state`,
`mahjong_table.formula.state`) are frozen slotted dataclasses that take their shared questions
from the mixins here (`PlayerFacts`, `TableFacts`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from mahjong_rules.seats import SEAT_COUNT

from mahjong_table.core.events import EXPOSURE_ADDED, NO_SEAT
from mahjong_table.core.frozen import fast_init

__all__ = [
    "MEMO",
    "SEAT_COUNT",
    "MeldState",
    "Phase",
    "PlayerFacts",
    "PlayerShape",
    "TableFacts",
    "TableShape",
    "WindowShape",
    "add_count",
    "added_kong_to_pong",
    "copier_setting",
    "hidden_from_all_but",
    "pong_to_added_kong",
    "pop_discard",
    "replaced",
    "stamped",
    "with_player",
]

_Frozen = TypeVar("_Frozen")
"""A frozen slotted dataclass of either family's state (`replaced` copies its slots)."""


MEMO = {"memo": True}
"""Metadata of a field holding a memo of values derived from the other fields (waits, a view's
tile codes): computed on first use, never compared or shown, and empty again in every copy that
`replaced` makes, so it can never describe other facts than its own value's."""


class Phase(StrEnum):
    """Where the game is. CLAIM covers the window on a discard and on an added kong."""

    DEALING = "dealing"
    EXCHANGE = "exchange"
    MISSING_SUIT = "missing_suit"
    TURN = "turn"
    CLAIM = "claim"
    ENDED = "ended"


class PlayerFacts:
    """What both families ask of one seat's facts the same way (a mixin: the player dataclass
    provides `concealed`, `won` and `left`)."""

    __slots__ = ()
    concealed: tuple[int, ...]
    won: bool
    left: bool

    @property
    def in_game(self) -> bool:
        """Still playing: neither won nor left."""
        return not self.won and not self.left

    @property
    def tile_count(self) -> int:
        """Concealed tiles held."""
        return sum(self.concealed)


class TableFacts:
    """What both families ask of a table's state the same way (a mixin: the state dataclass
    provides `players`, `wall_head`, `wall_tail` and `phase`)."""

    __slots__ = ()
    players: tuple[PlayerShape, ...]
    wall_head: int
    wall_tail: int
    phase: Phase

    @property
    def wall_remaining(self) -> int:
        """Tiles still in the wall: `wall[wall_head:wall_tail]`."""
        return self.wall_tail - self.wall_head

    @property
    def is_over(self) -> bool:
        """True once `GameEnded` was folded."""
        return self.phase is Phase.ENDED

    def seats_in_game(self) -> list[int]:
        """Seats neither won nor left, in seat order."""
        return [seat for seat, player in enumerate(self.players) if player.in_game]

    def next_seat_in_game(self, after_seat: int) -> int:
        """The first seat after `after_seat` in turn order that is still in the game, or -1."""
        players = self.players
        for seat in _SEATS_AFTER[after_seat]:
            player = players[seat]
            if not player.won and not player.left:
                return seat
        return NO_SEAT


_SEATS_AFTER = tuple(
    tuple((after_seat + offset) % SEAT_COUNT for offset in range(1, SEAT_COUNT + 1))
    for after_seat in range(SEAT_COUNT)
)
"""Per seat, every seat in turn order after it, itself last."""


@fast_init
@dataclass(frozen=True, slots=True)
class MeldState:
    """A meld on the table: kind "chow" (Formula; `tile` is the lowest of the run), "pong" or
    "kong"; `exposure` for kongs only; `from_seat` the seat whose tile made it, or -1 (an added
    kong keeps its pong's source, so a robbed kong can revert)."""

    kind: str
    tile: int
    exposure: str = ""
    from_seat: int = NO_SEAT

    @property
    def size(self) -> int:
        """Tiles in the meld: 3 or 4."""
        return 4 if self.kind == "kong" else 3

    @property
    def tiles(self) -> tuple[int, ...]:
        """The tiles the meld holds."""
        if self.kind == "chow":
            return (self.tile, self.tile + 1, self.tile + 2)
        return (self.tile,) * self.size


class PlayerShape(Protocol):
    """What the kernel reads of a seat's facts (either family's player)."""

    @property
    def player_id(self) -> str: ...
    @property
    def concealed(self) -> tuple[int, ...]: ...
    @property
    def melds(self) -> tuple[MeldState, ...]: ...
    @property
    def discards(self) -> tuple[int, ...]: ...
    @property
    def won(self) -> bool: ...
    @property
    def left(self) -> bool: ...
    @property
    def in_game(self) -> bool: ...
    @property
    def tile_count(self) -> int: ...
    @property
    def derived(self) -> dict[object, Any]: ...


class WindowShape(Protocol):
    """What the kernel reads of an open claim window (either family's)."""

    @property
    def tile(self) -> int: ...
    @property
    def from_seat(self) -> int: ...
    @property
    def pending(self) -> frozenset[int]: ...


class TableShape(Protocol):
    """What the kernel reads of a table's state (either family's): the functions of
    `core.decide`, `core.evolve` and `core.views` take any state of this shape."""

    @property
    def table_id(self) -> str: ...
    @property
    def phase(self) -> Phase: ...
    @property
    def version(self) -> int: ...
    @property
    def dealer_seat(self) -> int: ...
    @property
    def turn_seat(self) -> int: ...
    @property
    def drawn_tile(self) -> int | None: ...
    @property
    def window(self) -> WindowShape | None: ...
    @property
    def players(self) -> Sequence[PlayerShape]: ...
    @property
    def wall(self) -> tuple[int, ...]: ...
    @property
    def wall_head(self) -> int: ...
    @property
    def wall_tail(self) -> int: ...
    @property
    def wall_remaining(self) -> int: ...
    @property
    def hidden_counts(self) -> tuple[int, ...]: ...
    @property
    def end_reason(self) -> str: ...
    @property
    def is_over(self) -> bool: ...


def replaced(value: _Frozen, **changes: object) -> _Frozen:
    """`dataclasses.replace` for frozen slotted dataclasses (states, events), without `__init__`.

    The fold is the engine's hot path (every event replaces the table and a player): the copy is
    a straight-line function built once per class (`_copier`), several times faster than
    `dataclasses.replace`, and gives an equal value. A name that is not a field raises
    `AttributeError`.
    """
    cls = type(value)
    copier = _COPIERS.get(cls) or _copier(cls)
    copy: _Frozen = copier(value, changes)
    return copy


def stamped(fresh: _Frozen, **changes: object) -> _Frozen:
    """Set fields of a value the caller has just built and nobody else holds yet (a fold finishing
    the state it returns), saving a second copy. Never call it on a value that was handed out."""
    for name, new in changes.items():
        object.__setattr__(fresh, name, new)
    return fresh


_COPIERS: dict[type, Callable[[Any, dict[str, object]], Any]] = {}


def _copier(cls: type) -> Callable[[Any, dict[str, object]], Any]:
    """`replaced`'s copier of `cls` values: `copy_of(value, changes)` (`_copy_function`)."""
    copier: Callable[[Any, dict[str, object]], Any] = _copy_function(cls, (), takes_changes=True)
    _COPIERS[cls] = copier
    return copier


def copier_setting(cls: type[_Frozen], *names: str) -> Callable[..., _Frozen]:
    """`replaced` for one fold's fixed set of changes, for the hottest folds (a draw):
    `copy(value, **{name: new for each of names})`, every slot set once (no changes dict, no
    loop). A name that is not a field raises `AttributeError` here."""
    unknown = set(names) - set(cls.__slots__)  # type: ignore[attr-defined]  # slotted dataclasses only
    if unknown:
        raise AttributeError(f"{cls.__name__} has no fields {sorted(unknown)}")
    copier: Callable[..., _Frozen] = _copy_function(cls, names, takes_changes=False)
    return copier


def _copy_function(cls: type, names: tuple[str, ...], *, takes_changes: bool) -> Callable[..., Any]:
    """A function copying every slot of a `cls` value, one line per slot, the slots in `names`
    from its keyword arguments, then (`takes_changes`) the fields in its `changes` dict. A memo
    field (`MEMO`) starts empty.

    The copy is built as an instance of a mutable twin of `cls` (same bases, same slots, so the
    same memory layout), whose slots plain attribute stores set (the interpreter's fastest
    store; a frozen class's own `__setattr__` refuses them), and then given its class: CPython
    allows assigning `__class__` between classes of the same layout. Nobody sees the twin: the
    value is a `cls` before it is returned (a class whose layout a twin cannot share raises
    `TypeError` on its first copy).
    """
    slots: tuple[str, ...] = cls.__slots__  # type: ignore[attr-defined]  # slotted dataclasses only
    memos = {item.name for item in fields(cls) if item.metadata.get("memo")}
    twin = _TWINS.get(cls)
    if twin is None:
        twin = _TWINS[cls] = type(f"_{cls.__name__}Copy", cls.__bases__, {"__slots__": slots})
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_twin": twin, "_empty_memo": dict}
    if takes_changes:
        header = "def copy_of(value, changes):"
    else:
        header = f"def copy_of(value, *, {', '.join(names)}):" if names else "def copy_of(value):"
    lines = [header, "    copy = _new(_twin)"]
    for name in slots:
        source = name if name in names else "_empty_memo()" if name in memos else f"value.{name}"
        lines.append(f"    copy.{name} = {source}")
    if takes_changes:
        lines += ["    for name in changes:", "        setattr(copy, name, changes[name])"]
    lines += ["    copy.__class__ = _cls", "    return copy"]
    exec("\n".join(lines), namespace)  # source built above from the class's own slot names
    function: Callable[..., Any] = namespace["copy_of"]
    return function


_TWINS: dict[type, type] = {}
"""Each copied class's mutable twin (`_copy_function`)."""


# --- fold helpers of both families' `evolve` ----------------------------------------------------


_Player = TypeVar("_Player")


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


def pong_to_added_kong(melds: tuple[MeldState, ...], tile: int) -> tuple[MeldState, ...]:
    """The pong of `tile` becomes an added kong (RULES.md 1.5, 2.1); it keeps the seat whose
    discard made the pong, so a robbed kong can revert."""
    return tuple(
        replaced(meld, kind="kong", exposure=EXPOSURE_ADDED)
        if meld.kind == "pong" and meld.tile == tile
        else meld
        for meld in melds
    )


def added_kong_to_pong(melds: tuple[MeldState, ...], tile: int) -> tuple[MeldState, ...]:
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


_DiscardingPlayer = TypeVar("_DiscardingPlayer", bound=PlayerShape)


def pop_discard(
    players: tuple[_DiscardingPlayer, ...], seat: int, tile: int
) -> tuple[_DiscardingPlayer, ...]:
    """`players` with the last discard of `seat` (claimed, or won on) taken off its pile."""
    player = players[seat]
    assert player.discards and player.discards[-1] == tile, "claimed tile is not the last discard"
    return with_player(players, seat, replaced(player, discards=player.discards[:-1]))
