"""The room options a table is opened with (RULES.md 1 and 3), mirroring `mahjong.v1.RoomRules`.

Field names are the proto field names, so the service maps them 1:1. Defaults are the RULES.md
defaults. The table records the rules in `TableOpened`, so a catalog change never alters a game in
progress or its replay.
"""

from __future__ import annotations

from dataclasses import dataclass

VARIANT_SICHUAN_BLOODY = "sichuan_bloody"
VARIANT_FORMULA = "formula"


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
