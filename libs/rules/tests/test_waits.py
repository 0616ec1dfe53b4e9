"""Waits, wait multipliers and ready (RULES.md 1.7, 1.8)."""

import pytest
from mahjong_rules import (
    Meld,
    RulesError,
    find_waits,
    max_wait_multiplier,
    parse_tile,
    parse_tiles,
    tile_code,
    wait_multiplier,
    winning_tiles_of_counts,
)


def waits_of(
    concealed: str, melds: list[Meld] | None = None, missing: str | None = None
) -> list[tuple[str, int]]:
    result = find_waits(parse_tiles(concealed), melds or [], missing)  # type: ignore[arg-type]
    assert result.ready is bool(result.waits)
    return [(tile_code(wait.tile), wait.multiplier) for wait in result.waits]


def test_1_7_nine_gates_waits_on_every_rank_with_flush_and_roots() -> None:
    assert waits_of("1112345678999m") == [
        ("1m", 8),
        ("2m", 4),
        ("3m", 4),
        ("4m", 4),
        ("5m", 4),
        ("6m", 4),
        ("7m", 4),
        ("8m", 4),
        ("9m", 8),
    ]


def test_1_7_wait_multiplier_has_no_situational_extra() -> None:
    # 杠上开花 / 自摸 never enter a wait multiplier, 断幺九 does.
    assert waits_of("234m456m345p678p5p") == [("2p", 2), ("5p", 2), ("8p", 2)]


def test_1_7_seven_pairs_and_sets_waits_each_take_their_best_reading() -> None:
    assert waits_of("1122335566778m") == [("5m", 4), ("8m", 16)]


def test_1_8_a_wait_on_a_tile_held_four_times_does_not_count() -> None:
    melds = [Meld("pong", parse_tile(code)) for code in ("5p", "1m", "3m", "9p")]
    result = find_waits(parse_tiles("5p"), melds, "s")
    assert not result.ready
    assert result.max_multiplier == 0


@pytest.mark.parametrize(
    ("concealed", "missing"),
    [("123m456m456p789p5p", "p"), ("123m456p789s1122m", None)],
    ids=["1.3 missing-suit tile in hand", "1.6 three suits"],
)
def test_hands_that_cannot_win_are_not_ready(concealed: str, missing: str | None) -> None:
    assert waits_of(concealed, missing=missing) == []


def test_max_and_single_wait_multiplier_helpers() -> None:
    concealed = parse_tiles("1122335566778m")
    assert max_wait_multiplier(concealed, [], "p") == 16
    assert wait_multiplier(concealed, [], parse_tile("5m"), "p") == 4
    assert wait_multiplier(concealed, [], parse_tile("9m"), "p") == 0


def test_single_wait_with_melds_is_ready_on_its_pair() -> None:
    melds = [Meld("pong", parse_tile(code)) for code in ("1m", "4m", "6p", "9p")]
    assert waits_of("7p", melds) == [("7p", 4)]


def counts_of(concealed: str) -> list[int]:
    tiles = parse_tiles(concealed)
    return [tiles.count(tile) for tile in range(27)]


def test_winning_tiles_of_counts_are_the_waits_of_the_same_tiles() -> None:
    assert [tile_code(tile) for tile in winning_tiles_of_counts(counts_of("1112345678999m"), [], None)] == [
        tile_code(wait.tile) for wait in find_waits(parse_tiles("1112345678999m"), [], None).waits
    ]


@pytest.mark.parametrize(
    "counts",
    [
        [5] + [0] * 26,  # a fifth copy
        counts_of("111234567899m"),  # 12 tiles, not 13
        counts_of("1112345678999m")[:26],  # not 27 counts
    ],
)
def test_winning_tiles_of_counts_reject_impossible_hands(counts: list[int]) -> None:
    with pytest.raises(RulesError):
        winning_tiles_of_counts(counts, [], None)
