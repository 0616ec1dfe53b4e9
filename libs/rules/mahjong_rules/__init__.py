"""Pure Sichuan Bloody (血战到底) rules: tiles, wall, win check, waits, multipliers.

No I/O, no clocks, no randomness except a seed passed in. Where each rule lives:

- ``tiles``: the Tile type and the compact notation (RULES.md 0)
- ``wall``: shuffle from a seed, dealer by dice, the deal, head and tail draws (1.1)
- ``hand``: melds, suits held, the flower-pig test (1.6, 1.8)
- ``win``: the win check (1.6); ``decomposition``: its table-driven engine
- ``fans``: multipliers, extras, self-draw bonus and cap (1.7, 1.9)
- ``waits``: waits, wait multipliers and ready (1.7, 1.8)
- ``errors``: the typed errors
"""

from mahjong_rules.errors import (
    HandSizeError,
    InvalidMeldError,
    InvalidTileError,
    RulesError,
    TileCountError,
    WallError,
)
from mahjong_rules.fans import (
    DISCARD_CONTEXT,
    EXTRA_FANS,
    FANS_BY_ID,
    SHAPE_FANS,
    Evaluation,
    Fan,
    SelfDrawBonus,
    WinBy,
    WinContext,
    apply_cap,
    evaluate_win,
)
from mahjong_rules.hand import KongExposure, Meld, MeldKind, holds_three_suits, suits_held
from mahjong_rules.tiles import (
    SUITS,
    Suit,
    Tile,
    check_tile_copies,
    format_tiles,
    is_suited,
    make_tile,
    parse_tile,
    parse_tiles,
    rank_of,
    suit_of,
    tile_code,
)
from mahjong_rules.waits import (
    Wait,
    Waits,
    find_waits,
    max_wait_multiplier,
    wait_multiplier,
    winning_tiles,
    winning_tiles_of_counts,
)
from mahjong_rules.wall import (
    SICHUAN_TILES,
    WALL_TILE_COUNT,
    Deal,
    Wall,
    deal,
    dealer_from_dice,
    shuffled_wall,
)
from mahjong_rules.win import is_winning_hand

__all__ = [
    "DISCARD_CONTEXT",
    "EXTRA_FANS",
    "FANS_BY_ID",
    "SHAPE_FANS",
    "SICHUAN_TILES",
    "SUITS",
    "WALL_TILE_COUNT",
    "Deal",
    "Evaluation",
    "Fan",
    "HandSizeError",
    "InvalidMeldError",
    "InvalidTileError",
    "KongExposure",
    "Meld",
    "MeldKind",
    "RulesError",
    "SelfDrawBonus",
    "Suit",
    "Tile",
    "TileCountError",
    "Wait",
    "Waits",
    "Wall",
    "WallError",
    "WinBy",
    "WinContext",
    "apply_cap",
    "check_tile_copies",
    "deal",
    "dealer_from_dice",
    "evaluate_win",
    "find_waits",
    "format_tiles",
    "holds_three_suits",
    "is_suited",
    "is_winning_hand",
    "make_tile",
    "max_wait_multiplier",
    "parse_tile",
    "parse_tiles",
    "rank_of",
    "shuffled_wall",
    "suit_of",
    "suits_held",
    "tile_code",
    "wait_multiplier",
    "winning_tiles",
    "winning_tiles_of_counts",
]
