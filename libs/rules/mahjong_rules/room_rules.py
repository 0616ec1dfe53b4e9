"""The room options (RULES.md 1, 2 and 3): the one place that names them and states their defaults.

`RoomRules` mirrors `mahjong.v1.RoomRules` field for field (the field names are the proto's, so the
services map them 1:1; `tests/test_room_rules.py` checks them against the proto descriptor), but
for `members_only`, which decides who may enter a room, not how its games are played: matchmaking's
catalog adds it (`mahjong_matchmaking.catalog.CatalogRules`). The table records these rules in
`TableOpened`, so a catalog change never alters a game in progress or its replay; scoring settles by
that record. The settlement options of the rules library (`SettlementOptions`, `FormulaOptions`)
take their defaults from `DEFAULT_ROOM_RULES`.
"""

from __future__ import annotations

from dataclasses import dataclass

VARIANT_SICHUAN_BLOODY = "sichuan_bloody"
VARIANT_FORMULA = "formula"
VARIANTS = (VARIANT_SICHUAN_BLOODY, VARIANT_FORMULA)
"""The families a room may play (proto `Variant` without its prefix, lower case)."""


@dataclass(frozen=True, slots=True)
class RoomRules:
    """Every room option of RULES.md with its stated default (proto `RoomRules`)."""

    variant: str = VARIANT_SICHUAN_BLOODY
    coefficient: int = 1
    rake_beans: int = 0
    entry_floor_beans: int = 0
    turn_timeout_ms: int = 15_000
    reconnect_grace_ms: int = 60_000
    dealer_rotation: str = "dice"
    exchange_three: bool = True
    skip_win_lock: bool = True
    cap_points: int = 0
    self_draw_bonus: str = "double"
    flower_pig_points: int = 16
    escape_cap_points: int = 64
    escape_correction: int = 1
    escape_penalty_floor: int = 16
    escape_compensation_floor: int = 4
    min_fan: int = 8
    no_wildcard_fan: int = 2
    fan_term: str = "fan"
    escape_penalty_points: int = 16
    escape_compensation_points: int = 8


DEFAULT_ROOM_RULES = RoomRules()
"""Every option at its RULES.md default."""
