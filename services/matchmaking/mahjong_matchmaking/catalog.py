"""The room catalog (RULES.md 3): rooms and their options, read from a TOML data file.

Every option a room leaves out takes the RULES.md default, so the data file states only what makes a
room different. A bad catalog fails at start-up with the room and option named.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mahjong.v1 import common_pb2, rooms_pb2

DEFAULT_CATALOG_PATH = Path(__file__).with_name("rooms.toml")
VARIANTS = {
    "sichuan_bloody": common_pb2.VARIANT_SICHUAN_BLOODY,
    "formula": common_pb2.VARIANT_FORMULA,
}
CHOICES = {
    "dealer_rotation": ("dice", "first_winner"),
    "self_draw_bonus": ("double", "add_one"),
    "fan_term": ("fan", "fan_plus_8", "flat_10"),
}


class CatalogError(ValueError):
    """The catalog file is malformed; the message names the room and the option."""


@dataclass(frozen=True)
class RoomRules:
    """All room options of RULES.md with the defaults stated there."""

    variant: str
    coefficient: int
    rake_beans: int
    entry_floor_beans: int
    turn_timeout_ms: int = 15_000
    reconnect_grace_ms: int = 60_000  # RULES.md 1.10
    members_only: bool = False  # RULES.md 3; the catalog defaults it to true for Formula rooms
    dealer_rotation: str = "dice"  # RULES.md 1.1
    exchange_three: bool = True  # RULES.md 1.2
    skip_win_lock: bool = True  # RULES.md 1.4
    cap_points: int = 0  # RULES.md 1.9, 0 = no cap
    self_draw_bonus: str = "double"  # RULES.md 1.7
    flower_pig_points: int = 16  # RULES.md 1.8
    escape_cap_points: int = 64  # RULES.md 1.10
    escape_correction: int = 1
    escape_penalty_floor: int = 16
    escape_compensation_floor: int = 4
    min_fan: int = 8  # RULES.md 2.1
    no_wildcard_fan: int = 2  # RULES.md 2.2
    fan_term: str = "fan"  # RULES.md 2.3
    escape_penalty_points: int = 16
    escape_compensation_points: int = 8

    def to_proto(self) -> rooms_pb2.RoomRules:
        """The rules as the public protobuf message."""
        fields = dataclasses.asdict(self)
        fields["variant"] = VARIANTS[self.variant]
        return rooms_pb2.RoomRules(**fields)


@dataclass(frozen=True)
class Room:
    room_id: str
    display_name: str
    rules: RoomRules

    def to_proto(self, caller_may_enter: bool = False) -> rooms_pb2.Room:
        return rooms_pb2.Room(
            room_id=self.room_id,
            display_name=self.display_name,
            rules=self.rules.to_proto(),
            caller_may_enter=caller_may_enter,
        )

    def admits(self, member: bool) -> bool:
        """Whether a player (a Happy Points member or not) may enter: members-only rooms need one."""
        return member or not self.rules.members_only


def load_catalog(path: Path = DEFAULT_CATALOG_PATH) -> dict[str, Room]:
    """Rooms by id, in file order. Raises CatalogError naming the room and option that is wrong."""
    with path.open("rb") as file:
        document = tomllib.load(file)
    rooms: dict[str, Room] = {}
    for index, entry in enumerate(document.get("room", [])):
        room = _parse_room(dict(entry), f"{path.name} room #{index + 1}")
        if room.room_id in rooms:
            raise CatalogError(f"{path.name}: room id {room.room_id!r} appears twice")
        rooms[room.room_id] = room
    if not rooms:
        raise CatalogError(f"{path.name}: no [[room]] entries")
    return rooms


def _parse_room(entry: dict[str, Any], where: str) -> Room:
    try:
        room_id = str(entry.pop("room_id"))
        display_name = str(entry.pop("display_name", room_id))
    except KeyError as missing:
        raise CatalogError(f"{where}: missing {missing.args[0]}") from None
    where = f"room {room_id!r}"
    known = {field.name: field for field in dataclasses.fields(RoomRules)}
    for name, value in entry.items():
        if name not in known:
            raise CatalogError(f"{where}: unknown option {name!r}")
        expected = known[name].type
        if expected in ("int", int) and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise CatalogError(f"{where}: {name} must be a non-negative integer, got {value!r}")
        if expected in ("bool", bool) and not isinstance(value, bool):
            raise CatalogError(f"{where}: {name} must be true or false, got {value!r}")
        if name in CHOICES and value not in CHOICES[name]:
            raise CatalogError(f"{where}: {name} must be one of {', '.join(CHOICES[name])}, got {value!r}")
    if entry.get("variant") not in VARIANTS:
        raise CatalogError(f"{where}: variant must be one of {', '.join(VARIANTS)}")
    # RULES.md 3: the Formula series is open to Happy Points members only unless the room says not.
    entry.setdefault("members_only", entry["variant"] == "formula")
    try:
        rules = RoomRules(**entry)
    except TypeError as error:
        raise CatalogError(f"{where}: {error}") from None
    if rules.coefficient <= 0:
        raise CatalogError(f"{where}: coefficient must be positive")
    return Room(room_id=room_id, display_name=display_name, rules=rules)
