"""One source of truth for the room options (issue 14): `mahjong_rules.room_rules` names them and
states their defaults; the proto, matchmaking's catalog, the table's record and scoring's mapping
are checked against it, so they cannot drift apart.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor
from mahjong.v1 import common_pb2, rooms_pb2
from mahjong_matchmaking.catalog import CatalogRules, load_catalog
from mahjong_rules.formula.fans import NO_WILDCARD
from mahjong_rules.formula.scoring import FormulaOptions
from mahjong_rules.room_rules import DEFAULT_ROOM_RULES, VARIANT_FORMULA, VARIANTS, RoomRules
from mahjong_rules.settlement import SettlementOptions
from mahjong_scoring.game_facts.room_options import formula_options, settlement_options
from mahjong_table import codec

PROTO_FIELDS = rooms_pb2.RoomRules.DESCRIPTOR.fields
ADMISSION_ONLY = {"members_only"}
"""Options that decide who may enter a room, not how its games are played: the catalog has them,
the table does not record them."""
PYTHON_TYPES = {
    FieldDescriptor.TYPE_INT32: "int",
    FieldDescriptor.TYPE_INT64: "int",
    FieldDescriptor.TYPE_BOOL: "bool",
    FieldDescriptor.TYPE_STRING: "str",
    FieldDescriptor.TYPE_ENUM: "str",  # `variant`, as its lower-case name
}


def field_types(cls: type[Any]) -> dict[str, str]:
    return {field.name: str(field.type) for field in dataclasses.fields(cls)}


def test_the_room_rules_are_the_proto_s_fields_with_their_types() -> None:
    proto = {field.name: PYTHON_TYPES[field.type] for field in PROTO_FIELDS}
    assert field_types(CatalogRules) == proto
    assert field_types(RoomRules) == {
        name: kind for name, kind in proto.items() if name not in ADMISSION_ONLY
    }


def test_the_variants_are_the_proto_enum_s() -> None:
    names = [value.name for value in common_pb2.Variant.DESCRIPTOR.values if value.number]
    assert [name.removeprefix("VARIANT_").lower() for name in names] == list(VARIANTS)


def test_a_room_stating_only_what_it_must_takes_every_default(tmp_path: Any) -> None:
    catalog = tmp_path / "rooms.toml"
    catalog.write_text(
        '[[room]]\nroom_id = "r"\nvariant = "sichuan_bloody"\n'
        "coefficient = 7\nrake_beans = 3\nentry_floor_beans = 9\n"
    )
    rules = load_catalog(catalog)["r"].rules
    stated = {"variant": "sichuan_bloody", "coefficient": 7, "rake_beans": 3, "entry_floor_beans": 9}
    for field in dataclasses.fields(RoomRules):
        expected = stated.get(field.name, getattr(DEFAULT_ROOM_RULES, field.name))
        assert getattr(rules, field.name) == expected, field.name
    assert rules.members_only is False  # a Sichuan room admits everyone unless it says not


def test_the_table_records_every_rule_of_play_from_the_catalog_s_snapshot() -> None:
    for room in load_catalog().values():
        recorded = codec.room_rules_of(room.rules.to_proto())
        for field in dataclasses.fields(RoomRules):
            assert getattr(recorded, field.name) == getattr(room.rules, field.name), (
                room.room_id,
                field.name,
            )


def test_the_settlement_options_default_to_the_room_defaults() -> None:
    defaults = DEFAULT_ROOM_RULES
    sichuan = SettlementOptions(coefficient=defaults.coefficient, rake_beans=defaults.rake_beans)
    formula = FormulaOptions(coefficient=defaults.coefficient, rake_beans=defaults.rake_beans)
    for options in (sichuan, formula):
        for field in dataclasses.fields(options):
            assert getattr(options, field.name) == getattr(defaults, field.name), field.name
    assert NO_WILDCARD.fan == defaults.no_wildcard_fan


def proto_of(rules: RoomRules) -> rooms_pb2.RoomRules:
    message = codec.to_message(rules)
    assert isinstance(message, rooms_pb2.RoomRules)
    return message


@pytest.mark.parametrize("variant", VARIANTS)
def test_scoring_settles_by_every_recorded_option_its_family_pays_by(variant: str) -> None:
    """Each option of the rules library's settlement options is read from the recorded rules: a
    room that changes it settles with the change (an option scoring forgot would stay default)."""
    changed = {
        "coefficient": 3,
        "rake_beans": 11,
        "cap_points": 32,
        "self_draw_bonus": "add_one",
        "flower_pig_points": 8,
        "escape_cap_points": 128,
        "escape_correction": 2,
        "escape_penalty_floor": 20,
        "escape_compensation_floor": 5,
        "min_fan": 1,
        "no_wildcard_fan": 3,
        "fan_term": "fan_plus_8",
        "escape_penalty_points": 12,
        "escape_compensation_points": 6,
    }
    options: Any = settlement_options(proto_of(RoomRules(variant=variant)))
    family_options: Any = formula_options(proto_of(RoomRules(variant=variant)))
    read = family_options if variant == VARIANT_FORMULA else options
    for name in (field.name for field in dataclasses.fields(read)):
        assert name in changed, f"the test has no changed value for {name}"
        rules = dataclasses.replace(RoomRules(variant=variant), **{name: changed[name]})
        settled: Any = (
            formula_options(proto_of(rules))
            if variant == VARIANT_FORMULA
            else settlement_options(proto_of(rules))
        )
        assert getattr(settled, name) == changed[name], name


def test_an_unset_choice_is_its_default() -> None:
    """Proto3 cannot tell an empty string from an unset one: scoring reads it as the default."""
    unset = rooms_pb2.RoomRules(variant=common_pb2.VARIANT_FORMULA, coefficient=1)
    formula = formula_options(unset)
    assert formula is not None and formula.fan_term == DEFAULT_ROOM_RULES.fan_term
    sichuan = settlement_options(
        rooms_pb2.RoomRules(variant=common_pb2.VARIANT_SICHUAN_BLOODY, coefficient=1)
    )
    assert sichuan.self_draw_bonus == DEFAULT_ROOM_RULES.self_draw_bonus
