"""Wildcards (财神), 无财神, flowers and the minimum (RULES.md 2.1, 2.2).

The search's answers are checked against a brute force in the test: every multiset of tiles for
the wildcards (no fifth copy), every choice of the winning tile among them when it was drawn,
scored by the plain no-wildcard evaluation.
"""

import random
from itertools import combinations_with_replacement

import pytest
from mahjong_rules.errors import InvalidMeldError, RulesError, TileCountError
from mahjong_rules.formula.fans import NO_WILDCARD, FormulaMeld, FormulaWinContext, WinBy
from mahjong_rules.formula.wildcards import evaluate_formula_win, winning_substitutions
from mahjong_rules.tiles import Tile, format_tiles, parse_tile, parse_tiles

SELF_DRAW = FormulaWinContext(win_by=WinBy.SELF_DRAW)


def brute_force_best(
    concealed: list[Tile], win_tile: Tile, wildcard: Tile, context: FormulaWinContext
) -> tuple[int, set[tuple[Tile, ...]]]:
    """The best total fan (无财神 included) and every substitution reaching it, by trying all."""
    win_is_wildcard = win_tile == wildcard and context.win_by is WinBy.SELF_DRAW
    reals = [tile for tile in concealed if tile != wildcard]
    wildcard_count = len(concealed) - len(reals) + (1 if win_is_wildcard else 0)
    best_total, best = -1, set()
    for substitution in combinations_with_replacement(range(34), wildcard_count):
        tiles = reals + list(substitution) + ([] if win_is_wildcard else [win_tile])
        if any(tiles.count(tile) > 4 for tile in set(tiles)):
            continue
        for winning in set(substitution) if win_is_wildcard else {win_tile}:
            hand = list(tiles)
            hand.remove(winning)
            evaluation = evaluate_formula_win(hand, [], winning, context)
            if evaluation is None:
                continue
            total = evaluation.total_fan + (2 if all(tile == wildcard for tile in substitution) else 0)
            if total > best_total:
                best_total, best = total, {substitution}
            elif total == best_total:
                best.add(substitution)
    return best_total, best


def random_winning_hand(rng: random.Random) -> list[Tile]:
    while True:
        tiles: list[Tile] = []
        for _ in range(4):
            if rng.random() < 0.6:
                start = rng.randrange(3) * 9 + rng.randrange(7)
                tiles += [start, start + 1, start + 2]
            else:
                tiles += [rng.randrange(34)] * 3
        tiles += [rng.randrange(34)] * 2
        if all(tiles.count(tile) <= 4 for tile in tiles):
            return tiles


@pytest.mark.parametrize(
    ("concealed", "win_tile", "wildcard", "self_draw"),
    [
        pytest.param(
            "123456789m23p5s5m", "5s", "5m", False, id="RULES-2.2-two-wildcards-one-standing-for-itself"
        ),
        pytest.param("12345678m234p5s7z", "5s", "7z", False, id="RULES-2.2-one-wildcard-completes-清龙"),
        pytest.param("1345678m234p5s77z", "5s", "7z", False, id="RULES-2.2-two-wildcards"),
        pytest.param(
            "1345678m234p5s77z", "7z", "7z", True, id="RULES-2.2-three-wildcards-winning-tile-drawn"
        ),
        pytest.param("147m258p369s1z222m", "1z", "2m", True, id="RULES-2.2-组合龙-with-wildcards"),
        pytest.param("19m19p19s1235777z", "6z", "7z", False, id="RULES-2.2-十三幺-with-wildcards"),
    ],
)
def test_the_search_finds_the_brute_force_best(
    concealed: str, win_tile: str, wildcard: str, self_draw: bool
) -> None:
    context = SELF_DRAW if self_draw else FormulaWinContext()
    tiles, win, joker = parse_tiles(concealed), parse_tile(win_tile), parse_tile(wildcard)
    evaluation = evaluate_formula_win(tiles, [], win, context, wildcard=joker)
    best_total, best = brute_force_best(tiles, win, joker, context)
    assert evaluation is not None
    assert evaluation.total_fan == best_total
    assert evaluation.wildcards_as in best, (
        format_tiles(evaluation.wildcards_as),
        [format_tiles(s) for s in best],
    )


@pytest.mark.parametrize("wildcard_count", [1, 2, 3, 4])
def test_random_hands_with_1_to_4_wildcards_match_the_brute_force(wildcard_count: int) -> None:
    rng = random.Random(wildcard_count)
    for _ in range({1: 6, 2: 3, 3: 1, 4: 1}[wildcard_count]):
        hand = random_winning_hand(rng)
        rng.shuffle(hand)
        wildcard = next(tile for tile in range(33, -1, -1) if tile not in hand)
        hand[:wildcard_count] = [wildcard] * wildcard_count
        win = hand.pop()
        if wildcard_count == 4:
            # 34^4 substitutions are too many for a fast test: check the shapes, not the fans.
            reals = [0] * 34
            for tile in [*hand[wildcard_count:], win]:
                reals[tile] += 1
            found = winning_substitutions(reals, wildcard_count, 0)
            assert all(
                evaluate_formula_win(_without([*hand[wildcard_count:], win, *s]), [], s[-1]) is not None
                for s in found
                if all(reals[tile] + s.count(tile) <= 4 for tile in s)
            )
            evaluation = evaluate_formula_win(hand, [], win, wildcard=wildcard)
            assert evaluation is not None and len(evaluation.wildcards_as) == 4
            continue
        evaluation = evaluate_formula_win(hand, [], win, wildcard=wildcard)
        best_total, best = brute_force_best(hand, win, wildcard, FormulaWinContext())
        assert evaluation is not None
        assert (evaluation.total_fan, evaluation.wildcards_as in best) == (best_total, True)


def _without(tiles: list[Tile]) -> list[Tile]:
    """All tiles but the first copy of the last one (that one is the winning tile)."""
    rest = list(tiles)
    rest.remove(tiles[-1])
    return rest


def test_a_wildcard_standing_for_itself_scores_no_wildcard_fan() -> None:
    """RULES.md 2.2: 无财神 when the only wildcard stands for its own face."""
    evaluation = evaluate_formula_win(
        parse_tiles("123456789m234p5s"), [], parse_tile("5s"), wildcard=parse_tile("5m")
    )
    assert evaluation is not None
    assert evaluation.wildcards_as == (parse_tile("5m"),)
    assert ("no_wildcard", "无财神", 2) in {(fan.id, fan.name, fan.fan) for fan in evaluation.fans}
    assert evaluation.total_fan == 23


def test_no_wildcard_fan_without_any_wildcard_and_its_room_value() -> None:
    evaluation = evaluate_formula_win(
        parse_tiles("123456789m234p5s"), [], parse_tile("5s"), wildcard=parse_tile("7z"), no_wildcard_fan=5
    )
    assert evaluation is not None and evaluation.wildcards_as == ()
    assert any(fan.id == NO_WILDCARD.id and fan.fan == 5 for fan in evaluation.fans)


def test_plain_mcr_without_a_wildcard_has_no_no_wildcard_fan() -> None:
    evaluation = evaluate_formula_win(parse_tiles("123456789m234p5s"), [], parse_tile("5s"))
    assert evaluation is not None and all(fan.id != NO_WILDCARD.id for fan in evaluation.fans)


def test_a_wildcard_used_for_another_tile_loses_no_wildcard_fan() -> None:
    evaluation = evaluate_formula_win(
        parse_tiles("12345678m234p5s7z"), [], parse_tile("5s"), wildcard=parse_tile("7z")
    )
    assert evaluation is not None and evaluation.wildcards_as == (parse_tile("9m"),)
    assert all(fan.id != NO_WILDCARD.id for fan in evaluation.fans)


def test_a_discarded_wildcard_is_won_on_only_at_face_value() -> None:
    """RULES.md 2.1: 7z is the wildcard; won on a discarded 7z it is a plain 白, so no win here."""
    concealed = parse_tiles("12345678m234p55s")
    assert evaluate_formula_win(concealed, [], parse_tile("7z"), wildcard=parse_tile("7z")) is None
    drawn = evaluate_formula_win(concealed, [], parse_tile("7z"), SELF_DRAW, wildcard=parse_tile("7z"))
    assert drawn is not None and drawn.wildcards_as == (parse_tile("9m"),)


def test_a_substitution_never_makes_a_fifth_copy() -> None:
    """RULES.md 2.2: 1m x4 are held (three in hand, one in the melded chow): the wildcard cannot be 1m."""
    melds = [FormulaMeld("chow", parse_tile("1m"))]
    concealed = parse_tiles("111m23m789s5z7z")
    reals = [0] * 34
    for tile in parse_tiles("111m23m789s55z"):
        reals[tile] += 1
    assert (parse_tile("1m"),) in winning_substitutions(reals, 1, 1), "the shape alone would take 1m"
    evaluation = evaluate_formula_win(concealed, melds, parse_tile("5z"), wildcard=parse_tile("7z"))
    assert evaluation is not None
    assert parse_tile("1m") not in evaluation.wildcards_as


def test_flowers_count_once_won_but_never_toward_the_minimum() -> None:
    """RULES.md 2.2: a chicken hand is 8; three flowers make 11 but the minimum still sees 8."""
    melds = [
        FormulaMeld("chow", parse_tile("1m")),
        FormulaMeld("chow", parse_tile("5p")),
        FormulaMeld("pong", parse_tile("8s")),
    ]
    evaluation = evaluate_formula_win(parse_tiles("45s77z"), melds, parse_tile("3s"), flowers=3, min_fan=9)
    assert evaluation is not None
    assert (evaluation.total_fan, evaluation.fan_toward_minimum, evaluation.meets_min) == (11, 8, False)
    assert evaluate_formula_win(parse_tiles("45s77z"), melds, parse_tile("3s"), min_fan=8).meets_min  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("concealed", "melds", "win_tile", "message"),
    [
        ("1111m456p789s555z", [], "1m", "tile 1m appears 5 times"),
        ("55p123m456s11z", [FormulaMeld("pong", parse_tile("5p"))], "5p", "tile 5p appears 6 times"),
        (
            "9s123m111z",
            [FormulaMeld("kong", parse_tile("9s"), "concealed"), FormulaMeld("chow", parse_tile("7s"))],
            "1z",
            "tile 9s appears 6 times",
        ),
    ],
)
def test_a_fifth_copy_anywhere_is_named(
    concealed: str, melds: list[FormulaMeld], win_tile: str, message: str
) -> None:
    """RULES.md 2.2: the set holds four of each tile; hand, winning tile and melds count together."""
    with pytest.raises(TileCountError, match=message):
        evaluate_formula_win(parse_tiles(concealed), melds, parse_tile(win_tile))


def test_bad_hands_raise_typed_errors() -> None:
    with pytest.raises(TileCountError):
        evaluate_formula_win(parse_tiles("1111m456p789s555z"), [], parse_tile("1m"))
    with pytest.raises(InvalidMeldError):
        evaluate_formula_win(
            parse_tiles("123m456p789s5z"),
            [FormulaMeld("pong", parse_tile("7z"))],
            parse_tile("5z"),
            wildcard=parse_tile("7z"),
        )
    with pytest.raises(RulesError):
        evaluate_formula_win(parse_tiles("123m456p789s5z1f"), [], parse_tile("5z"))
    with pytest.raises(RulesError):
        evaluate_formula_win(parse_tiles("123456789m234p5s"), [], parse_tile("5s"), flowers=9)
