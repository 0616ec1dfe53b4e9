"""The bots' discard choice (`bots.choose_discard`) from per-suit rank counts is the policy's
definition: the allowed tile with the fewest copies (up to 3) and neighbours within two ranks,
then an edge tile, then the lowest code; compared with that definition written out plainly."""

from __future__ import annotations

import random
from collections import Counter

from mjctl.bots import choose_discard, tiles_of


def reference_choose_discard(hand: str, allowed: list[str]) -> str:
    counts = Counter(tiles_of(hand))

    def usefulness(tile: str) -> tuple[int, int, str]:
        rank, suit = int(tile[0]), tile[1]
        neighbours = sum(
            counts.get(f"{rank + step}{suit}", 0) for step in (-2, -1, 1, 2) if 1 <= rank + step <= 9
        )
        return (min(counts[tile], 3) * 4 + neighbours, 0 if rank in (1, 9) else 1, tile)

    return min(allowed, key=usefulness)


def test_choose_discard_is_the_policy_on_seeded_random_hands() -> None:
    rng = random.Random(7)
    for _ in range(20_000):
        suits = rng.choice(["mps", "mpsz"])
        tiles = [f"{rng.randint(1, 9)}{rng.choice(suits)}" for _ in range(rng.randint(1, 14))]
        hand = "".join(tiles) if rng.random() < 0.5 else "".join(sorted(tiles, key=lambda t: (t[1], t[0])))
        allowed = sorted(set(tiles))
        if rng.random() < 0.3:
            allowed = rng.sample(allowed, max(1, len(allowed) // 2))
        if rng.random() < 0.1:
            allowed.append("5s")  # a tile the hand may not hold
        assert choose_discard(hand, allowed) == reference_choose_discard(hand, allowed), (hand, allowed)


def test_choose_discard_keeps_pairs_and_runs() -> None:
    assert choose_discard("123m55p9s", ["1m", "2m", "3m", "5p", "9s"]) == "9s"
    assert choose_discard("1m9m", ["9m", "1m"]) == "1m"  # ties: the lowest code
