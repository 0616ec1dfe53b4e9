"""The formula table's state, derived only by folding events (`evolve`).

Hands are counts over the 42 tile kinds of the rules library (0..33 suited and honors, 34..41
flowers): flowers sit in a hand only between being dealt or drawn and their 补花.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mahjong_rules.formula.wall import FLOWER_TILE_LIMIT, FORMULA_WALL_TILE_COUNT, HONOR_TILE_LIMIT
from mahjong_rules.room_rules import RoomRules

from mahjong_table.core.events import NO_SEAT
from mahjong_table.core.frozen import fast_init
from mahjong_table.core.state import MEMO, MeldState, Phase, PlayerFacts, TableFacts

TILE_KIND_COUNT = FLOWER_TILE_LIMIT
EMPTY_COUNTS: tuple[int, ...] = (0,) * TILE_KIND_COUNT

ASK_WIN = "win"
ASK_PONG = "pong"
ASK_KONG = "kong"
ASK_CHOW = "chow"


@fast_init
@dataclass(frozen=True, slots=True)
class FormulaPlayer(PlayerFacts):
    """One seat's facts."""

    player_id: str
    concealed: tuple[int, ...] = EMPTY_COUNTS
    melds: tuple[MeldState, ...] = ()
    discards: tuple[int, ...] = ()
    flowers: tuple[int, ...] = ()
    won: bool = False
    left: bool = False
    derived: dict[object, Any] = field(
        default_factory=dict, init=False, repr=False, compare=False, metadata=MEMO
    )
    """Memo of what the aggregate derives from this player's facts (`concealed_tiles`, win shapes);
    empty in every copy `replaced` makes."""

    def held_flowers(self) -> list[int]:
        """Flowers in the hand still to be set aside (补花), lowest first."""
        if not any(self.concealed[HONOR_TILE_LIMIT:]):
            return []
        counts = self.concealed
        return [tile for tile in range(HONOR_TILE_LIMIT, TILE_KIND_COUNT) for _ in range(counts[tile])]

    def concealed_tiles(self) -> list[int]:
        """The concealed tiles as a sorted list (a new list: callers may change it)."""
        tiles: tuple[int, ...] | None = self.derived.get("concealed_tiles")
        if tiles is None:
            tiles = tuple(tile for tile in range(TILE_KIND_COUNT) for _ in range(self.concealed[tile]))
            self.derived["concealed_tiles"] = tiles
        return list(tiles)


@fast_init
@dataclass(frozen=True, slots=True)
class Ask:
    """One seat asked about the open discard, with what it may do: a win, or pong/kong/chow
    (`chows` = the lowest tiles of the runs it may chow)."""

    seat: int
    kinds: tuple[str, ...]
    chows: tuple[int, ...] = ()


@fast_init
@dataclass(frozen=True, slots=True)
class FormulaWindow:
    """The open claim window on a discard (RULES.md 2.1).

    Seats are asked one at a time, in priority order: those who can win in turn order after the
    discarder (the first to take the win gets it, 截和), then the seat that can pong or kong, then
    the next seat's chow. `asks[0]` is asked now; a pass moves on to the next.

    `rob_kong`: the window on the tile of an added kong (抢杠和, RULES.md 2.2). Only wins are asked,
    in turn order after the declarer; when nobody robs, the declarer draws the replacement.
    """

    tile: int
    from_seat: int
    asks: tuple[Ask, ...]
    rob_kong: bool = False

    @property
    def pending(self) -> frozenset[int]:
        """The seat asked now (at most one)."""
        return frozenset({self.asks[0].seat}) if self.asks else frozenset()

    @property
    def current(self) -> Ask | None:
        """The ask answered now, if any."""
        return self.asks[0] if self.asks else None


@fast_init
@dataclass(frozen=True, slots=True)
class FormulaTableState(TableFacts):
    """Everything the formula aggregate knows about one table's hand."""

    table_id: str
    room_id: str
    rules: RoomRules
    dealer_seat: int
    wall: tuple[int, ...]
    players: tuple[FormulaPlayer, ...]
    wildcard_indicator: int
    wildcard: int
    wall_flowers_before: tuple[int, ...] = ()
    """How many flowers the wall holds before each position (145 entries): so the non-flower tiles
    left between head and tail are counted in O(1), derived once from the wall at the opening."""
    turned_flowers: tuple[int, ...] = ()
    """Flowers turned up while looking for the indicator: set aside, nobody's (RULES.md 2.1)."""
    wall_head: int = 0
    wall_tail: int = FORMULA_WALL_TILE_COUNT
    phase: Phase = Phase.DEALING
    turn_seat: int = NO_SEAT
    drawn_tile: int | None = None
    turn_after_meld: bool = False
    """After a pong or chow the seat must discard: no win, no kong before a draw."""
    turn_after_kong: bool = False
    window: FormulaWindow | None = None
    win_count: int = 0
    winner_seat: int = NO_SEAT
    bird_tile: int | None = None
    bird_seat: int = NO_SEAT
    wall_exhausted: bool = False
    end_reason: str = ""
    version: int = 0
    hidden_counts: tuple[int, ...] = (0, 0, 0, 0)
    """Per seat, how many events so far are hidden from it (another seat's claim pass or claim
    timeout, `views.redact`): a seat's own sequence numbers skip them (`mahjong_table.visibility`)."""

    def non_flower_remaining(self) -> int:
        """Wall tiles that are not flowers: what draws can still bring into a hand."""
        flowers = self.wall_flowers_before[self.wall_tail] - self.wall_flowers_before[self.wall_head]
        return self.wall_tail - self.wall_head - flowers
