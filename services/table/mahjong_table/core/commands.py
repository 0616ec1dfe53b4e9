"""Commands a seat (or the server) sends to a table. Tiles and suits are compact code strings as
clients send them ("5p", "m"); `decide` validates them and raises `InvalidCommandError` when
malformed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from mahjong_table.core.frozen import fast_init


@fast_init
@dataclass(frozen=True, slots=True)
class ExchangeThree:
    """Pick three tiles of one suit to pass on in the exchange (RULES.md 1.2)."""

    seat: int
    tiles: tuple[str, ...]


@fast_init
@dataclass(frozen=True, slots=True)
class DeclareMissingSuit:
    """Declare the missing suit, "m", "p" or "s" (RULES.md 1.3)."""

    seat: int
    suit: str


@fast_init
@dataclass(frozen=True, slots=True)
class Discard:
    """Discard a tile on the seat's own turn (RULES.md 1.4)."""

    seat: int
    tile: str


@fast_init
@dataclass(frozen=True, slots=True)
class Pong:
    """Pong the open discard (RULES.md 1.4)."""

    seat: int


@fast_init
@dataclass(frozen=True, slots=True)
class Chow:
    """Formula only (RULES.md 2.1): chow the previous seat's open discard; `tile` is the lowest
    tile of the run ("3m" for 3m4m5m)."""

    seat: int
    tile: str


@fast_init
@dataclass(frozen=True, slots=True)
class Kong:
    """Kong: with `tile` None, the exposed kong of the open discard; with a tile, on the seat's own
    turn, the concealed kong of four held tiles or the added kong onto an own pong (RULES.md 1.5)."""

    seat: int
    tile: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class Win:
    """Win: by self-draw on the seat's own turn, on the open discard, or by robbing a kong."""

    seat: int


@fast_init
@dataclass(frozen=True, slots=True)
class Pass:
    """Decline the open discard or added kong (RULES.md 1.4)."""

    seat: int


@fast_init
@dataclass(frozen=True, slots=True)
class Leave:
    """Leave the table before the end (RULES.md 1.10): reason "leave" or "disconnected" (the
    server sends the latter when the player stayed away past `reconnect_grace_ms`)."""

    seat: int
    reason: str = "leave"


@fast_init
@dataclass(frozen=True, slots=True)
class ExpireDeadline:
    """Server command: the current deadline expired; act automatically for every seat that was
    waited on (RULES.md 1.2, 1.3; issue 4 auto-play)."""


TableCommand: TypeAlias = (
    ExchangeThree | DeclareMissingSuit | Discard | Pong | Chow | Kong | Win | Pass | Leave | ExpireDeadline
)
"""Every command a table accepts."""
