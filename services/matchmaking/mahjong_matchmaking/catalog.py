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
from mahjong_rules.room_rules import VARIANT_FORMULA, VARIANT_SICHUAN_BLOODY, RoomRules

DEFAULT_CATALOG_PATH = Path(__file__).with_name("rooms.toml")
VARIANTS = {
    VARIANT_SICHUAN_BLOODY: common_pb2.VARIANT_SICHUAN_BLOODY,
    VARIANT_FORMULA: common_pb2.VARIANT_FORMULA,
}
REQUIRED = ("variant", "coefficient", "rake_beans", "entry_floor_beans")
"""Options every room states (RULES.md 3): the others take their RULES.md default."""
CHOICES = {
    "dealer_rotation": ("dice", "first_winner"),
    "self_draw_bonus": ("double", "add_one"),
    "fan_term": ("fan", "fan_plus_8", "flat_10"),
}


class CatalogError(ValueError):
    """The catalog file is malformed; the message names the room and the option."""


@dataclass(frozen=True)
class CatalogRules(RoomRules):
    """A room's options as the catalog states them: the rules of its games (`RoomRules`, the
    RULES.md defaults in `mahjong_rules.room_rules`) and who may enter it."""

    members_only: bool = False  # RULES.md 3; the catalog defaults it to true for Formula rooms

    def to_proto(self) -> rooms_pb2.RoomRules:
        """The rules as the public protobuf message."""
        fields = dataclasses.asdict(self)
        fields["variant"] = VARIANTS[self.variant]
        return rooms_pb2.RoomRules(**fields)


@dataclass(frozen=True)
class Room:
    room_id: str
    display_name: str
    rules: CatalogRules

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
    known = {field.name: field for field in dataclasses.fields(CatalogRules)}
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
    for name in REQUIRED:
        if name not in entry:
            raise CatalogError(f"{where}: missing {name}")
    if entry.get("variant") not in VARIANTS:
        raise CatalogError(f"{where}: variant must be one of {', '.join(VARIANTS)}")
    # RULES.md 3: the Formula series is open to Happy Points members only unless the room says not.
    entry.setdefault("members_only", entry["variant"] == VARIANT_FORMULA)
    try:
        rules = CatalogRules(**entry)
    except TypeError as error:
        raise CatalogError(f"{where}: {error}") from None
    if rules.coefficient <= 0:
        raise CatalogError(f"{where}: coefficient must be positive")
    return Room(room_id=room_id, display_name=display_name, rules=rules)
