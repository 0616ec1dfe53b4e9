"""Formula waits (听牌) with their scores (RULES.md 2.1, 2.2): ``formula_waits``.

Every answer is checked against a brute force: ``evaluate_formula_win`` of a discard win on each
tile 0..33 the hand and melds do not already hold four of.
"""

import random
from collections.abc import Sequence

import pytest
from mahjong_rules.errors import HandSizeError, InvalidMeldError, InvalidTileError, RulesError, TileCountError
from mahjong_rules.formula.bench import winning_hands
from mahjong_rules.formula.fans import FormulaMeld, FormulaWinContext, WinBy
from mahjong_rules.formula.waits import formula_waits
from mahjong_rules.formula.wildcards import FormulaEvaluation, evaluate_formula_win
from mahjong_rules.tiles import Tile, parse_tile, parse_tiles, tile_code


def brute_force_waits(
    concealed: Sequence[Tile],
    melds: Sequence[FormulaMeld],
    wildcard: Tile | None,
    min_fan: int = 8,
    flowers: int = 0,
) -> list[tuple[Tile, FormulaEvaluation]]:
    """Every tile 0..33, won on a discard, that makes a winning hand (no fifth copy)."""
    held = [*concealed, *(tile for meld in melds for tile in meld.tiles)]
    found = []
    for tile in range(34):
        if held.count(tile) >= 4:
            continue
        evaluation = evaluate_formula_win(
            concealed, melds, tile, FormulaWinContext(), wildcard=wildcard, min_fan=min_fan, flowers=flowers
        )
        if evaluation is not None:
            found.append((tile, evaluation))
    return found


def answer(
    concealed: Sequence[Tile],
    melds: Sequence[FormulaMeld] = (),
    wildcard: Tile | None = None,
    min_fan: int = 8,
    flowers: int = 0,
) -> list[tuple[Tile, FormulaEvaluation]]:
    waits = formula_waits(concealed, melds, wildcard=wildcard, min_fan=min_fan, flowers=flowers)
    assert waits.ready == bool(waits.waits)
    return [(wait.tile, wait.evaluation) for wait in waits.waits]


def codes(waits: list[tuple[Tile, FormulaEvaluation]]) -> list[str]:
    return [tile_code(tile) for tile, _ in waits]


def fan_ids(evaluation: FormulaEvaluation) -> list[str]:
    return [fan.id for fan in evaluation.fans]


CHOW_1P = FormulaMeld("chow", parse_tile("1p"))
PONG_9S = FormulaMeld("pong", parse_tile("9s"))
CONCEALED_KONG_1Z = FormulaMeld("kong", parse_tile("1z"), "concealed")


@pytest.mark.parametrize(
    ("concealed", "melds", "wildcard", "expected"),
    [
        pytest.param("123456789m1122p", [], None, ["1p", "2p"], id="RULES-2.2-plain-MCR-shanpon"),
        pytest.param("1112345678999m", [], None, [f"{r}m" for r in range(1, 10)], id="RULES-2.2-九莲宝灯"),
        pytest.param("1122334455667m", [], None, ["1m", "4m", "7m"], id="RULES-2.2-七对-or-sets"),
        pytest.param(
            "2345m", [CHOW_1P, PONG_9S, CONCEALED_KONG_1Z], None, ["2m", "5m"], id="RULES-2.2-melds"
        ),
        pytest.param("123456789m1122p", [], "7z", ["1p", "2p"], id="RULES-2.2-wildcard-not-held"),
        pytest.param("123456789m12p5s7z", [], "7z", ["3p", "5s"], id="RULES-2.2-one-wildcard"),
        pytest.param("2345m56s7z", [CHOW_1P, PONG_9S], "7z", None, id="RULES-2.2-wildcard-with-melds"),
        pytest.param("1345678m234p5s77z", [], "7z", None, id="RULES-2.2-two-wildcards"),
    ],
)
def test_waits_equal_the_brute_force_rules_2_2(
    concealed: str, melds: list[FormulaMeld], wildcard: str | None, expected: list[str] | None
) -> None:
    tiles = parse_tiles(concealed)
    joker = parse_tile(wildcard) if wildcard else None
    found = answer(tiles, melds, joker)
    assert found == brute_force_waits(tiles, melds, joker)
    if expected is not None:
        assert codes(found) == expected


@pytest.mark.parametrize("wildcards", [0, 1, 2])
def test_random_ready_and_not_ready_hands_equal_the_brute_force_rules_2_2(wildcards: int) -> None:
    """Seeded winning hands less one tile (ready), half of them with a tile changed (often not)."""
    rng = random.Random(2200 + wildcards)
    checked = 0
    for concealed, _ in winning_hands(40, seed=22 + wildcards):
        hand = list(concealed)
        if rng.random() < 0.5:
            hand[rng.randrange(13)] = rng.randrange(34)
        wildcard = next(tile for tile in range(33, -1, -1) if tile not in hand)
        hand[:wildcards] = [wildcard] * wildcards
        if any(hand.count(tile) > 4 for tile in hand):
            continue
        assert answer(hand, [], wildcard) == brute_force_waits(hand, [], wildcard), hand
        checked += 1
    assert checked >= 30


def test_thirteen_orphans_waits_on_all_thirteen_rules_2_2() -> None:
    """十三幺 with no pair yet: a 13-sided wait, every wait scoring the 88-fan 十三幺."""
    hand = parse_tiles("19m19p19s1234567z")
    found = answer(hand)
    assert codes(found) == ["1m", "9m", "1p", "9p", "1s", "9s", "1z", "2z", "3z", "4z", "5z", "6z", "7z"]
    assert all("thirteen_orphans" in fan_ids(evaluation) for _, evaluation in found)
    assert found == brute_force_waits(hand, [], None)


def test_seven_pairs_waits_on_its_single_rules_2_2() -> None:
    """七对: six pairs and a single wait on the single only."""
    found = answer(parse_tiles("1133m5577p2299s4z"))
    assert codes(found) == ["4z"]
    assert "seven_pairs" in fan_ids(found[0][1])


def test_a_held_wildcard_makes_more_waits_rules_2_1_2_2() -> None:
    """The same hand with a plain 5s waits on 3p only; with the wildcard 7z instead of a second 5s
    it also waits on 5s (the wildcard stands for 3p) (2.2)."""
    assert codes(answer(parse_tiles("123456789m12p55s"))) == ["3p"]
    with_wildcard = answer(parse_tiles("123456789m12p5s7z"), wildcard=parse_tile("7z"))
    assert codes(with_wildcard) == ["3p", "5s"]
    assert [evaluation.wildcards_as for _, evaluation in with_wildcard] == [
        (parse_tile("5s"),),
        (parse_tile("3p"),),
    ]


def test_a_discarded_wildcard_is_won_on_at_face_value_rules_2_1() -> None:
    """A wait on the wildcard's own face: the discarded tile is that plain tile, not a wildcard."""
    joker = parse_tile("7z")
    hand = parse_tiles("123456789m112p7z")
    found = answer(hand, wildcard=joker)
    assert codes(found) == ["1p", "2p", "3p", "4p"]
    # Drawn, a 7z would be a second wildcard and win (112p + two wildcards); discarded it does not.
    drawn = evaluate_formula_win(hand, [], joker, FormulaWinContext(win_by=WinBy.SELF_DRAW), wildcard=joker)
    assert drawn is not None
    assert joker not in [tile for tile, _ in found]
    # Two wildcards held: the discarded 7z is a plain 7z; the two held stand for 3p and 7z.
    two = answer(parse_tiles("123456789m12p77z"), wildcard=joker)
    face = dict(two)[joker]
    assert face.wildcards_as == (parse_tile("3p"), joker)
    assert two == brute_force_waits(parse_tiles("123456789m12p77z"), [], joker)


def test_a_fifth_copy_is_never_a_wait_rules_2_2() -> None:
    """A 5z single beside a pong of 5z: the only completing tile would be a fifth 5z: not ready."""
    waits = formula_waits(parse_tiles("123456789m5z"), [FormulaMeld("pong", parse_tile("5z"))])
    assert not waits.ready and waits.waits == ()
    # Four wildcards held: every tile but the wildcard's own face (a fifth 1z) is a wait.
    joker = parse_tile("1z")
    hand = parse_tiles("123456789m1111z")
    found = answer(hand, wildcard=joker)
    assert [tile for tile, _ in found] == [tile for tile in range(34) if tile != joker]
    assert found == brute_force_waits(hand, [], joker)


def test_min_fan_sets_meets_min_but_not_ready_rules_2_1() -> None:
    """The minimum (2.1) decides meets_min only: a hand below it is still ready. Flowers count in the
    total, never toward the minimum (2.2)."""
    hand = parse_tiles("234m567p345s678s5z")
    below = formula_waits(hand, [], min_fan=8)
    assert below.ready
    [wait] = below.waits
    assert tile_code(wait.tile) == "5z"
    assert wait.evaluation.fan_toward_minimum < 8 and not wait.evaluation.meets_min
    no_minimum = formula_waits(hand, [], min_fan=0, flowers=3)
    [wait] = no_minimum.waits
    assert wait.evaluation.meets_min
    assert wait.evaluation.total_fan == wait.evaluation.fan_toward_minimum + 3
    assert fan_ids(wait.evaluation)[-1] == "flower_tiles"
    assert answer(hand, min_fan=0, flowers=3) == brute_force_waits(hand, [], None, min_fan=0, flowers=3)


def test_winds_reach_the_evaluation_rules_2_2() -> None:
    """Seat and round wind: a pong of 南 scores 门风刻 for the south seat only."""
    hand = parse_tiles("123456789m222z5p")
    east = formula_waits(hand, [])
    south = formula_waits(hand, [], seat_wind=parse_tile("2z"))
    assert "seat_wind" not in fan_ids(east.waits[0].evaluation)
    assert "seat_wind" in fan_ids(south.waits[0].evaluation)


@pytest.mark.parametrize(
    ("concealed", "melds", "options", "error"),
    [
        pytest.param("123456789m112p", [], {}, HandSizeError, id="14-tiles"),
        pytest.param("123456789m1p", [], {}, HandSizeError, id="12-tiles"),
        pytest.param("123456789m1122p", [PONG_9S], {}, HandSizeError, id="13-tiles-beside-a-meld"),
        pytest.param("1m", [PONG_9S] * 5, {}, HandSizeError, id="five-melds"),
        pytest.param("123456789m112p1f", [], {}, InvalidTileError, id="a-flower"),
        pytest.param(
            "2345m56s7z", [PONG_9S, CHOW_1P], {"wildcard": "9s"}, InvalidMeldError, id="wildcard-meld"
        ),
        pytest.param("12345m99s", [PONG_9S, CHOW_1P], {}, TileCountError, id="fifth-copy"),
        pytest.param("123456789m1122p", [], {"wildcard": "1f"}, InvalidTileError, id="flower-wildcard"),
        pytest.param("123456789m1122p", [], {"flowers": 9}, RulesError, id="nine-flowers"),
        pytest.param("123456789m1122p", [], {"min_fan": -1}, RulesError, id="negative-min-fan"),
        pytest.param("123456789m1122p", [], {"seat_wind": "5z"}, InvalidTileError, id="seat-wind-not-a-wind"),
    ],
)
def test_impossible_positions_raise_typed_errors(
    concealed: str, melds: list[FormulaMeld], options: dict[str, object], error: type[RulesError]
) -> None:
    tiles = parse_tiles(concealed, check_copies=False)
    kwargs = {key: parse_tile(value) if isinstance(value, str) else value for key, value in options.items()}
    with pytest.raises(error):
        formula_waits(tiles, melds, **kwargs)  # type: ignore[arg-type]
