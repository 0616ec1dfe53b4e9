"""Tiles and compact notation (RULES.md 0)."""

import pytest
from mahjong_rules import (
    InvalidTileError,
    TileCountError,
    format_tiles,
    make_tile,
    parse_tile,
    parse_tiles,
    rank_of,
    suit_of,
    tile_code,
)


@pytest.mark.parametrize(
    ("code", "tile"),
    [("1m", 0), ("9m", 8), ("1p", 9), ("5p", 13), ("9s", 26), ("1z", 27), ("7z", 33), ("1f", 34), ("8f", 41)],
    ids=lambda value: f"0 {value}",
)
def test_every_family_has_its_tile_range(code: str, tile: int) -> None:
    assert parse_tile(code) == tile
    assert tile_code(tile) == code


def test_runs_share_the_suit_letter_that_follows_them() -> None:
    assert [tile_code(tile) for tile in parse_tiles("11122233m456p")] == (
        ["1m", "1m", "1m", "2m", "2m", "2m", "3m", "3m", "4p", "5p", "6p"]
    )


def test_format_is_sorted_and_canonical() -> None:
    assert format_tiles(parse_tiles("9s 456p 3m 1z 2f 11m")) == "113m456p9s1z2f"
    assert format_tiles([]) == ""


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("0m", "'0m'"),
        ("8z", "'8z'"),
        ("9f", "'9f'"),
        ("123x", "'x'"),
        ("123", "'123'"),
        ("m", "'m'"),
    ],
    ids=[
        "0 rank zero",
        "0 only seven honors",
        "0 only eight flowers",
        "0 bad letter",
        "0 no letter",
        "0 no digit",
    ],
)
def test_a_bad_code_raises_an_error_naming_it(text: str, named: str) -> None:
    with pytest.raises(InvalidTileError, match=named):
        parse_tiles(text)


def test_a_fifth_copy_raises_an_error_naming_the_tile() -> None:
    with pytest.raises(TileCountError, match="5p"):
        parse_tiles("55555p")


def test_a_second_copy_of_a_flower_is_impossible() -> None:
    with pytest.raises(TileCountError, match="3f"):
        parse_tiles("33f")


def test_copies_are_not_checked_when_asked_not_to() -> None:
    assert len(parse_tiles("55555p", check_copies=False)) == 5


def test_suit_and_rank_helpers() -> None:
    tile = make_tile("p", 5)
    assert tile_code(tile) == "5p"
    assert suit_of(tile) == "p"
    assert rank_of(tile) == 5
    with pytest.raises(InvalidTileError, match="27"):
        suit_of(27)
    with pytest.raises(InvalidTileError):
        tile_code(42)
