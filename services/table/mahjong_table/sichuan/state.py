"""The Sichuan Bloody table's state, derived only by folding events (`evolve`): what it holds
beyond the kernel's (`mahjong_table.core.state`): exchange picks, missing suits, the skip-win lock,
two-stage claim windows.

Hands are 27 tile counts (index = rules-library tile int): do you hold it, can you pong, do you
still hold your missing suit are count lookups.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from mahjong_rules.room_rules import RoomRules
from mahjong_rules.tiles import SUITED_TILE_KIND_COUNT
from mahjong_rules.wall import WALL_TILE_COUNT

from mahjong_table.core.events import NO_SEAT
from mahjong_table.core.frozen import fast_init
from mahjong_table.core.state import MEMO, MeldState, Phase, PlayerFacts, TableFacts

TILE_KIND_COUNT = SUITED_TILE_KIND_COUNT
EMPTY_COUNTS: tuple[int, ...] = (0,) * TILE_KIND_COUNT
_NO_SUIT_TILES = (0,) * 9


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


@fast_init
@dataclass(frozen=True, slots=True)
class PlayerState(PlayerFacts):
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

    def holds_missing_suit(self) -> bool:
        """True while a tile of the declared missing suit is held (RULES.md 1.3)."""
        missing = self.missing_suit
        if missing is None:
            return False
        return self.concealed[missing * 9 : missing * 9 + 9] != _NO_SUIT_TILES


@fast_init
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


@fast_init
@dataclass(frozen=True, slots=True)
class TableState(TableFacts):
    """Everything the aggregate knows about one table's game."""

    table_id: str
    room_id: str
    rules: RoomRules
    dealer_seat: int
    exchange_direction: str
    wall: tuple[int, ...]
    players: tuple[PlayerState, ...]
    wall_head: int = 0
    """Index of the next head draw."""
    wall_tail: int = WALL_TILE_COUNT
    """One past the index of the next tail draw: the wall is `wall[wall_head:wall_tail]`."""
    phase: Phase = Phase.DEALING
    turn_seat: int = NO_SEAT
    drawn_tile: int | None = None
    turn_after_meld: bool = False
    """After a pong the seat must discard: no win, no kong before a draw."""
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
