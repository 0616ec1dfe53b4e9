"""Automatic actions the server takes for a player whose deadline expired (RULES.md 1.2, 1.3;
issue 4 auto-play). Deterministic functions of the state, so a replay needs only the events."""

from __future__ import annotations

from mahjong_table.sichuan import rules_adapter
from mahjong_table.sichuan.hands import allowed_discards
from mahjong_table.sichuan.state import TILE_KIND_COUNT, PlayerState, TableState


def suit_sizes(player: PlayerState) -> list[int]:
    """Concealed tiles per suit (m, p, s)."""
    return [sum(player.concealed[suit * 9 : suit * 9 + 9]) for suit in range(3)]


def automatic_exchange_pick(player: PlayerState) -> tuple[int, ...]:
    """RULES.md 1.2 timeout rule: the suit with the fewest tiles among suits holding at least 3
    (lowest suit on a tie), its three lowest tiles."""
    sizes = suit_sizes(player)
    suit = min((suit for suit in range(3) if sizes[suit] >= 3), key=lambda suit: (sizes[suit], suit))
    picked: list[int] = []
    for tile in range(suit * 9, suit * 9 + 9):
        picked.extend([tile] * min(player.concealed[tile], 3 - len(picked)))
    return tuple(picked)


def automatic_missing_suit(player: PlayerState) -> int:
    """RULES.md 1.3 timeout rule: the suit with the fewest tiles (lowest suit on a tie)."""
    sizes = suit_sizes(player)
    return min(range(3), key=lambda suit: (sizes[suit], suit))


def automatic_discard(state: TableState, seat: int) -> int:
    """Issue 4 auto-play: a missing-suit tile first (the drawn one if it is one, else the lowest),
    else the drawn tile, else (no draw: dealer's first turn, after a pong) the highest tile held."""
    player = state.players[seat]
    drawn = state.drawn_tile
    if player.holds_missing_suit():
        if drawn is not None and rules_adapter.suit_of(drawn) == player.missing_suit:
            return drawn
        return allowed_discards(player)[0]
    if drawn is not None:
        return drawn
    return max(tile for tile in range(TILE_KIND_COUNT) if player.concealed[tile])
