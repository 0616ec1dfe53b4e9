"""Wall, dealer and deal (RULES.md 1.1)."""

from collections import Counter

import pytest
from mahjong_rules import SICHUAN_TILES, Wall, WallError, deal, dealer_from_dice, shuffled_wall


def test_the_wall_holds_108_tiles_four_of_each_suited_kind() -> None:
    wall = shuffled_wall(7)
    assert len(wall) == 108
    assert Counter(wall) == Counter(SICHUAN_TILES)
    assert set(wall) == set(range(27))


def test_the_same_seed_gives_the_same_wall_and_another_seed_another() -> None:
    assert shuffled_wall(42) == shuffled_wall(42)
    assert shuffled_wall(42) != shuffled_wall(43)


@pytest.mark.parametrize(
    ("roller", "die1", "die2", "dealer"),
    [(0, 1, 1, 1), (0, 6, 6, 3), (2, 3, 4, 0), (3, 1, 2, 1), (1, 2, 2, 0)],
    ids=lambda value: f"1.1 {value}",
)
def test_dealer_is_roller_plus_sum_minus_one(roller: int, die1: int, die2: int, dealer: int) -> None:
    assert dealer_from_dice(roller, die1, die2) == dealer


@pytest.mark.parametrize(("roller", "die1", "die2"), [(4, 1, 1), (0, 0, 3), (0, 3, 7)])
def test_bad_dice_or_seat_raise(roller: int, die1: int, die2: int) -> None:
    with pytest.raises(WallError):
        dealer_from_dice(roller, die1, die2)


@pytest.mark.parametrize("dealer", [0, 1, 2, 3])
def test_the_dealer_gets_14_tiles_the_others_13_and_tiles_are_conserved(dealer: int) -> None:
    tiles = shuffled_wall(dealer)
    result = deal(tiles, dealer)
    assert [len(hand) for hand in result.hands] == [14 if seat == dealer else 13 for seat in range(4)]
    assert result.wall.remaining == 108 - 53
    dealt = [tile for hand in result.hands for tile in hand]
    rest = list(result.wall.tiles[result.wall.head_drawn :])
    assert Counter(dealt + rest) == Counter(SICHUAN_TILES)


def test_deal_follows_the_table_custom_of_fours_then_ones() -> None:
    tiles = list(range(27)) * 4
    result = deal(tiles, 2)
    assert result.hands[2][:4] == tuple(tiles[0:4])
    assert result.hands[3][:4] == tuple(tiles[4:8])
    assert result.hands[2][12] == tiles[48]
    assert result.hands[2][13] == tiles[52]


def test_head_draws_take_from_the_front_and_tail_draws_from_the_back() -> None:
    wall = Wall((1, 2, 3, 4))
    tile, wall = wall.draw_head()
    assert tile == 1
    tile, wall = wall.draw_tail()
    assert tile == 4
    tile, wall = wall.draw_tail()
    assert tile == 3
    assert wall.remaining == 1
    tile, wall = wall.draw_head()
    assert tile == 2
    assert wall.is_exhausted
    with pytest.raises(WallError, match="exhausted"):
        wall.draw_head()
    with pytest.raises(WallError, match="exhausted"):
        wall.draw_tail()
