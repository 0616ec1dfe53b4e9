"""Events of one table's game, mirroring `protos/mahjong/v1/table_events.proto` field for field.

Conventions (so a colleague can map them 1:1 to the protobuf messages):
- Every field has the proto field's name. Repeated fields are tuples.
- Tiles are compact code strings (RULES.md 0): "1m".."9m", "1p".."9p", "1s".."9s". A redacted
  (hidden) tile is the empty string "" and a redacted tile list is the empty tuple.
- Suits are "m", "p" or "s"; a redacted suit is "".
- Enums are strings equal to the proto enum value names without their prefix, lower case:
  `KongExposure` "exposed" / "added" / "concealed", `WinBy` "self_draw" / "discard" / "rob_kong".
- "No seat" is -1, as in the protos.

Events are facts: they are never rejected by `evolve`, which asserts invariants instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from mahjong_rules.room_rules import RoomRules

from mahjong_table.core.frozen import fast_init

NO_SEAT = -1

EXPOSURE_EXPOSED = "exposed"
EXPOSURE_ADDED = "added"
EXPOSURE_CONCEALED = "concealed"

WIN_BY_SELF_DRAW = "self_draw"
WIN_BY_DISCARD = "discard"
WIN_BY_ROB_KONG = "rob_kong"

DIRECTION_CLOCKWISE = "clockwise"
DIRECTION_COUNTER_CLOCKWISE = "counter_clockwise"
DIRECTION_OPPOSITE = "opposite"
EXCHANGE_DIRECTIONS = (DIRECTION_CLOCKWISE, DIRECTION_COUNTER_CLOCKWISE, DIRECTION_OPPOSITE)

LEAVE_REASON_LEAVE = "leave"
LEAVE_REASON_DISCONNECTED = "disconnected"
LEAVE_REASONS = (LEAVE_REASON_LEAVE, LEAVE_REASON_DISCONNECTED)

TIMEOUT_PHASE_EXCHANGE = "exchange"
TIMEOUT_PHASE_MISSING_SUIT = "missing_suit"
TIMEOUT_PHASE_TURN = "turn"
TIMEOUT_PHASE_CLAIM = "claim"

END_REASON_THREE_WINS = "three_wins"
END_REASON_WALL_EXHAUSTED = "wall_exhausted"
END_REASON_ESCAPES = "escapes"


@fast_init
@dataclass(frozen=True, slots=True)
class SeatAssignment:
    """One seat at the table (proto `SeatAssignment`)."""

    seat: int
    player_id: str
    ticket_id: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class Meld:
    """A meld laid open (proto `Meld`): kind "pong" or "kong"; exposure only for kongs ("" else)."""

    kind: str
    tile: str
    exposure: str = ""
    from_seat: int = NO_SEAT


@fast_init
@dataclass(frozen=True, slots=True)
class Fan:
    """One fan of an evaluated winning hand (proto `Fan`), as reported by the rules library."""

    id: str
    name: str
    multiplier: int
    count: int = 1


@fast_init
@dataclass(frozen=True, slots=True)
class TableOpened:
    """The game opened with its complete wall, dice, dealer and exchange direction (RULES.md 1.1, 1.2).

    `exchange_direction` is "" when the room plays without exchange three. The formula-only fields
    `wildcard_indicator` and `wildcard` stay "" in Sichuan Bloody.
    """

    table_id: str
    room_id: str
    rules: RoomRules
    seats: tuple[SeatAssignment, ...]
    wall: tuple[str, ...]
    dice_roller_seat: int
    die_1: int
    die_2: int
    dealer_seat: int
    exchange_direction: str
    wildcard_indicator: str = ""
    wildcard: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class DealtHand:
    """One seat's starting tiles (proto `DealtHand`)."""

    seat: int
    tiles: tuple[str, ...]


@fast_init
@dataclass(frozen=True, slots=True)
class HandsDealt:
    """The deal from the head of the wall: the dealer 14 tiles, the others 13 (RULES.md 1.1)."""

    hands: tuple[DealtHand, ...]
    wall_remaining: int


@fast_init
@dataclass(frozen=True, slots=True)
class ExchangePicked:
    """A player's hidden exchange-three pick: three tiles of one suit (RULES.md 1.2)."""

    seat: int
    tiles: tuple[str, ...]
    automatic: bool = False


@fast_init
@dataclass(frozen=True, slots=True)
class ExchangeTransfer:
    """Three tiles passed from one seat to another in the exchange (proto `ExchangeTransfer`)."""

    from_seat: int
    to_seat: int
    tiles: tuple[str, ...]


@fast_init
@dataclass(frozen=True, slots=True)
class TilesExchanged:
    """All picks were in; all swaps happened at once in the announced direction (RULES.md 1.2)."""

    direction: str
    transfers: tuple[ExchangeTransfer, ...]


@fast_init
@dataclass(frozen=True, slots=True)
class MissingSuitChosen:
    """A player's hidden missing-suit choice (RULES.md 1.3)."""

    seat: int
    suit: str
    automatic: bool = False


@fast_init
@dataclass(frozen=True, slots=True)
class MissingSuitsDeclared:
    """All four choices were in and are now public; `suits` is indexed by seat (RULES.md 1.3)."""

    suits: tuple[str, ...]


@fast_init
@dataclass(frozen=True, slots=True)
class TileDrawn:
    """A draw from the head of the wall, or from the tail after a kong (RULES.md 1.1, 1.5)."""

    seat: int
    tile: str
    from_tail: bool
    wall_remaining: int


@fast_init
@dataclass(frozen=True, slots=True)
class TileDiscarded:
    """A discard; `automatic` when the server discarded for a player whose turn timed out."""

    seat: int
    tile: str
    automatic: bool = False


@fast_init
@dataclass(frozen=True, slots=True)
class ClaimPassed:
    """A player asked about a discard (or an added kong) passed (RULES.md 1.4).

    `passed_win` marks a declined win and `passed_win_multiplier` its multiplier: the skip-win lock
    keeps the player from winning on another discard until their next draw unless a later win
    scores higher.
    """

    seat: int
    tile: str
    passed_win: bool = False
    passed_win_multiplier: int = 0
    automatic: bool = False


@fast_init
@dataclass(frozen=True, slots=True)
class PongClaimed:
    """A pong of a discard (RULES.md 1.4); the claimant must discard next."""

    seat: int
    from_seat: int
    tile: str


@fast_init
@dataclass(frozen=True, slots=True)
class ChowClaimed:
    """Formula (RULES.md 2.1): a chow of the previous seat's discard; `tile` is the lowest of the
    run and `claimed_tile` the discard. The claimant must discard next."""

    seat: int
    from_seat: int
    tile: str
    claimed_tile: str


@fast_init
@dataclass(frozen=True, slots=True)
class FlowerReplaced:
    """Formula (RULES.md 2.1, 补花): a flower the seat held is set aside face up (public); its
    replacement follows as a `TileDrawn` from the tail."""

    seat: int
    flower: str


@fast_init
@dataclass(frozen=True, slots=True)
class BirdRevealed:
    """Formula (RULES.md 2.3): the bird after the win and the seat it lands on (public)."""

    tile: str
    seat: int


@fast_init
@dataclass(frozen=True, slots=True)
class KongDeclared:
    """A kong (RULES.md 1.5). `from_seat` is the discarder for an exposed kong, -1 otherwise.

    An added kong may still be robbed (RULES.md 1.5): the claim window on its tile closes with a
    `KongRobbed` (the kong is void and earns nothing) or with anything else, usually the
    replacement `TileDrawn` with `from_tail` (the kong stands). Consumers that pay kongs should
    settle an added kong only when its window has closed.
    """

    seat: int
    tile: str
    exposure: str
    from_seat: int = NO_SEAT


@fast_init
@dataclass(frozen=True, slots=True)
class KongRobbed:
    """An added kong was robbed by every seat in `winner_seats` (RULES.md 1.5): the kong is void,
    the pong stays, and the robbed tile goes to the kong declarer's discards."""

    kong_seat: int
    tile: str
    winner_seats: tuple[int, ...]


@fast_init
@dataclass(frozen=True, slots=True)
class PlayerWon:
    """A win (RULES.md 1.6) with the evaluation of the rules library (fans and multiplier, 1.7).

    `concealed` is the winner's concealed hand without the winning tile. `after_kong` marks a
    self-draw on a kong replacement (杠上开花) or a win on the discard made right after the
    discarder's kong (杠上炮); `last_tile` a self-draw of the last wall tile (海底捞月);
    `first_turn` 天胡 (dealer) or 地胡 (non-dealer). Formula (RULES.md 2.2): `fan_total` and
    `fourth_tile` (和绝张, the three other copies were visible when the hand won), so scoring can
    evaluate the hand again from the event and the public events before it.
    """

    seat: int
    win_tile: str
    win_by: str
    from_seat: int
    concealed: tuple[str, ...]
    melds: tuple[Meld, ...]
    fans: tuple[Fan, ...]
    multiplier: int
    after_kong: bool
    last_tile: bool
    first_turn: bool
    win_order: int
    fan_total: int = 0
    fourth_tile: bool = False


@fast_init
@dataclass(frozen=True, slots=True)
class PlayerLeft:
    """A player escaped before the game ended (RULES.md 1.10): "leave" or "disconnected"."""

    seat: int
    reason: str
    had_won: bool


@fast_init
@dataclass(frozen=True, slots=True)
class TurnTimedOut:
    """A deadline expired ("exchange", "missing_suit", "turn" or "claim"); the automatic action
    follows as its own event."""

    seat: int
    phase: str


@fast_init
@dataclass(frozen=True, slots=True)
class WallExhausted:
    """The wall is empty and the last discard is resolved (RULES.md 1.6); 1.8 checks follow."""


@fast_init
@dataclass(frozen=True, slots=True)
class RevealedHand:
    """A seat's final hand at the end of the game (proto `RevealedHand`)."""

    seat: int
    concealed: tuple[str, ...]
    melds: tuple[Meld, ...]
    won: bool
    left: bool


@fast_init
@dataclass(frozen=True, slots=True)
class GameEnded:
    """The game is over: "three_wins", "wall_exhausted" or "escapes" (RULES.md 1.6, 1.10)."""

    reason: str
    hands: tuple[RevealedHand, ...]


TableEvent: TypeAlias = (
    TableOpened
    | HandsDealt
    | ExchangePicked
    | TilesExchanged
    | MissingSuitChosen
    | MissingSuitsDeclared
    | TileDrawn
    | TileDiscarded
    | ClaimPassed
    | PongClaimed
    | KongDeclared
    | KongRobbed
    | PlayerWon
    | PlayerLeft
    | TurnTimedOut
    | WallExhausted
    | GameEnded
    | ChowClaimed
    | FlowerReplaced
    | BirdRevealed
)
"""Every event of a table's stream."""
