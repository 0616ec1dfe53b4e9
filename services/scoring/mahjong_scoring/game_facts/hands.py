"""Sichuan Bloody hand facts for the checks (RULES.md 1.7, 1.8, 1.10): is a hand a flower pig, is
it ready, and what is its best wait worth, judged by the rules library from scoring's own view."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from mahjong_rules import Meld, Suit, Tile, find_waits, holds_three_suits
from mahjong_rules.settlement import SEAT_COUNT, HandFacts

from mahjong_scoring.game_facts.state import GameFactsState
from mahjong_scoring.game_facts.steps import ScoredFans, fan_lines

WAITING_HAND_TILE_COUNT: Final = 13


def hand_facts_now(
    state: GameFactsState,
) -> tuple[tuple[HandFacts, ...], tuple[tuple[int, ScoredFans], ...]]:
    """Every seat's hand as the checks see it now (a seat out of the game has empty facts), and
    each ready seat's best wait."""
    hands: list[HandFacts] = []
    fans: list[tuple[int, ScoredFans]] = []
    for seat in range(SEAT_COUNT):
        if not state.in_game(seat):
            hands.append(HandFacts())
            continue
        facts, best_wait = hand_facts(state.hand_tiles(seat), state.melds[seat], state.missing_suits[seat])
        hands.append(facts)
        if best_wait is not None:
            fans.append((seat, best_wait))
    return tuple(hands), tuple(fans)


def hand_facts(
    concealed: Sequence[Tile], melds: Sequence[Meld], missing_suit: Suit | None
) -> tuple[HandFacts, ScoredFans | None]:
    """Flower pig, ready and highest wait multiplier of one hand (RULES.md 1.7, 1.8), with that wait's fans.

    A waiting hand (13 tiles counting melds) is judged as it is. A hand holding one tile more (the
    player was about to discard when the game was judged, e.g. at an escape) is judged after its
    best discard: scoring gives the player the benefit of the discard they would make. Any other
    size (before the deal) is neither ready nor judged a flower pig.
    """
    waiting_count = WAITING_HAND_TILE_COUNT - 3 * len(melds)
    if len(concealed) == waiting_count:
        return _waiting_hand_facts(concealed, melds, missing_suit)
    if len(concealed) != waiting_count + 1:
        return HandFacts(), None
    best: tuple[HandFacts, ScoredFans | None] | None = None
    for discard in sorted(set(concealed)):
        rest = list(concealed)
        rest.remove(discard)
        candidate = _waiting_hand_facts(rest, melds, missing_suit)
        if best is None or _rank(candidate[0]) > _rank(best[0]):
            best = candidate
    assert best is not None
    return best


def _rank(facts: HandFacts) -> tuple[bool, bool, int]:
    return (not facts.holds_three_suits, facts.ready, facts.max_wait_multiplier)


def _waiting_hand_facts(
    concealed: Sequence[Tile], melds: Sequence[Meld], missing_suit: Suit | None
) -> tuple[HandFacts, ScoredFans | None]:
    if holds_three_suits(concealed, melds):
        return HandFacts(holds_three_suits=True), None
    waits = find_waits(concealed, melds, missing_suit)
    if not waits.ready:
        return HandFacts(), None
    best_wait = max(waits.waits, key=lambda wait: wait.multiplier)
    facts = HandFacts(ready=True, max_wait_multiplier=best_wait.multiplier)
    return facts, ScoredFans(best_wait.multiplier, fan_lines(best_wait.fans))
