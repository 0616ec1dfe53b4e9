"""The room catalog (RULES.md 3) loads with RULES.md defaults and rejects bad files clearly."""

from pathlib import Path

import pytest
from mahjong.v1 import common_pb2
from mahjong_matchmaking.catalog import CatalogError, load_catalog


def test_the_shipped_catalog_has_the_example_rooms_of_rules_3() -> None:
    rooms = load_catalog()
    novice = rooms["sichuan-novice"].rules
    assert (novice.coefficient, novice.rake_beans, novice.entry_floor_beans, novice.cap_points) == (
        100,
        50,
        2000,
        0,
    )
    capped = rooms["sichuan-cap64"].rules
    assert (capped.coefficient, capped.rake_beans, capped.entry_floor_beans, capped.cap_points) == (
        1000,
        500,
        50000,
        64,
    )


def test_the_practice_room_lets_a_few_hundred_beans_sit_at_a_64_cap_table() -> None:
    # Issue 15: the low-floor 64-cap room where short payers (RULES.md 1.9) are common.
    practice = load_catalog()["sichuan-cap64-practice"].rules
    assert (practice.coefficient, practice.rake_beans, practice.entry_floor_beans, practice.cap_points) == (
        100,
        10,
        100,
        64,
    )
    assert not practice.members_only


def test_options_left_out_take_the_rules_defaults() -> None:
    rules = load_catalog()["sichuan-novice"].rules
    assert rules.exchange_three and rules.skip_win_lock  # RULES.md 1.2, 1.4
    assert rules.self_draw_bonus == "double"  # RULES.md 1.7
    assert rules.flower_pig_points == 16  # RULES.md 1.8
    assert rules.reconnect_grace_ms == 60_000  # RULES.md 1.10
    assert (rules.escape_cap_points, rules.escape_penalty_floor, rules.escape_compensation_floor) == (
        64,
        16,
        4,
    )


def test_rules_convert_to_the_public_message() -> None:
    message = load_catalog()["sichuan-cap64"].to_proto()
    assert message.rules.variant == common_pb2.VARIANT_SICHUAN_BLOODY
    assert message.rules.cap_points == 64


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            'room_id = "r"\nvariant = "riichi"\ncoefficient = 1\nrake_beans = 0\nentry_floor_beans = 0',
            "variant",
        ),
        (
            'room_id = "r"\nvariant = "formula"\ncoefficient = 1\nrake_beans = 0\nentry_floor_beans = 0\n'
            "colour = 3",
            "unknown option 'colour'",
        ),
        (
            'room_id = "r"\nvariant = "formula"\ncoefficient = 1\nrake_beans = -5\nentry_floor_beans = 0',
            "rake_beans must be a non-negative integer",
        ),
        (
            'room_id = "r"\nvariant = "sichuan_bloody"\ncoefficient = 1\nrake_beans = 0\n'
            'entry_floor_beans = 0\nself_draw_bonus = "triple"',
            "self_draw_bonus must be one of",
        ),
        ('variant = "formula"', "missing room_id"),
    ],
)
def test_a_bad_catalog_names_the_room_and_option(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "rooms.toml"
    path.write_text("[[room]]\n" + body + "\n")
    with pytest.raises(CatalogError, match=message):
        load_catalog(path)
