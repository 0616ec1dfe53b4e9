"""Seats and their winds: the one place for the table's constants (RULES.md 0, 2.2).

A table has four seats, 0..3 in turn order. In Formula the dealer sits East and the other winds
follow turn order (South, West, North); the rules library, the table engine, scoring and `mjctl`
all take these from here.
"""

from __future__ import annotations

from mahjong_rules.tiles import Tile

SEAT_COUNT = 4
"""Seats are 0..3 in turn order (RULES.md 0)."""

EAST_WIND: Tile = 27
"""东, tile 1z; South, West and North follow it (28..30)."""


def seat_wind(seat: int, dealer_seat: int) -> Tile:
    """The wind of `seat` when `dealer_seat` deals: the dealer is East, then turn order (RULES.md 2.2)."""
    return EAST_WIND + (seat - dealer_seat) % SEAT_COUNT
