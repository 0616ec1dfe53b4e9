"""The win check (RULES.md 1.6) and the flower-pig test (1.8)."""

import pytest
from mahjong_rules import (
    HandSizeError,
    InvalidMeldError,
    InvalidTileError,
    Meld,
    Suit,
    TileCountError,
    holds_three_suits,
    is_winning_hand,
    parse_tile,
    parse_tiles,
)

WINS = [
    ("1.6 four sets + pair", "123m456m456p789p55p", [], "s"),
    ("1.6 seven pairs", "1133m22557799p44p", [], "s"),
    ("1.6 four equal tiles are two pairs", "1111m33m557799p22p", [], "s"),
    ("1.6 one suit", "11123456789999m", [], "p"),
    ("1.6 melds count toward the fourteen", "123m456m789m77p", [Meld("pong", parse_tile("9p"))], "s"),
    ("1.6 no missing suit declared yet", "123m456m456p789p55p", [], None),
]
NOT_WINS = [
    ("1.6 not sets + pair", "123m456m456p789p56p", [], "s"),
    ("1.6 three suits", "123m456p789s11122m", [], None),
    ("1.3 a missing-suit tile in hand", "123m456m456p789p55p", [], "p"),
    ("1.3 a meld of the missing suit", "123m456m789m77p", [Meld("pong", parse_tile("9s"))], "s"),
    ("1.6 a meld in a third suit", "123m456m789m77p", [Meld("pong", parse_tile("9s"))], None),
]


@pytest.mark.parametrize(
    ("concealed", "melds", "missing"), [case[1:] for case in WINS], ids=[c[0] for c in WINS]
)
def test_winning_hands(concealed: str, melds: list[Meld], missing: Suit | None) -> None:
    assert is_winning_hand(parse_tiles(concealed), melds, missing)


@pytest.mark.parametrize(
    ("concealed", "melds", "missing"), [case[1:] for case in NOT_WINS], ids=[c[0] for c in NOT_WINS]
)
def test_hands_that_do_not_win(concealed: str, melds: list[Meld], missing: Suit | None) -> None:
    assert not is_winning_hand(parse_tiles(concealed), melds, missing)


def test_wrong_size_raises() -> None:
    with pytest.raises(HandSizeError, match="expected 14"):
        is_winning_hand(parse_tiles("123m456m456p789p5p"), [], None)


def test_a_fifth_copy_raises_naming_the_tile() -> None:
    with pytest.raises(TileCountError, match="5p"):
        is_winning_hand(parse_tiles("123m456m789m55p"), [Meld("kong", 13, "exposed")], None)
    with pytest.raises(TileCountError, match="1m"):
        is_winning_hand(parse_tiles("11111m222m333m444m", check_copies=False), [], None)


def test_honors_are_not_sichuan_tiles() -> None:
    with pytest.raises(InvalidTileError, match="1z"):
        is_winning_hand(parse_tiles("123m456m456p789p1z1z"), [], None)


@pytest.mark.parametrize(
    ("kind", "exposure"), [("kong", None), ("pong", "exposed"), ("chow", None)], ids=["kong", "pong", "chow"]
)
def test_malformed_melds_raise(kind: str, exposure: str | None) -> None:
    with pytest.raises(InvalidMeldError):
        Meld(kind, 0, exposure)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("concealed", "melds", "expected"),
    [
        ("123m456p789s", [], True),
        ("123m456p", [Meld("pong", parse_tile("9s"))], True),
        ("123m456p789p", [], False),
    ],
    ids=["1.8 three suits concealed", "1.8 third suit in a meld", "1.8 two suits"],
)
def test_flower_pig_holds_three_suits(concealed: str, melds: list[Meld], expected: bool) -> None:
    assert holds_three_suits(parse_tiles(concealed), melds) is expected
