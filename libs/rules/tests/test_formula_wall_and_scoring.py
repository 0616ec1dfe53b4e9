"""Formula wall (RULES.md 2.1) and birds, dealer doubling, fan_term, beans, rake, escape (2.3)."""

import pytest
from mahjong_rules.formula.fans import WinBy
from mahjong_rules.formula.scoring import (
    FanTerm,
    FormulaOptions,
    FormulaWinFact,
    bird_seat,
    bird_value,
    fan_term_points,
    formula_escape_instruction,
    formula_rake_instructions,
    formula_win_instructions,
)
from mahjong_rules.formula.wall import (
    FORMULA_TILES,
    bird_tile,
    is_flower,
    open_formula_hand,
    replace_flowers,
    shuffled_formula_wall,
    wildcard_successor,
)
from mahjong_rules.settlement import (
    HOUSE_ESCAPE,
    HOUSE_RAKE,
    Instruction,
    InvalidSettlementFactError,
    Payment,
    Reason,
    apply_balance,
    beans_by_party,
    to_beans,
)
from mahjong_rules.tiles import parse_tile, parse_tiles
from mahjong_rules.wall import Wall, deal


def test_the_wall_holds_144_tiles_with_8_flowers() -> None:
    assert len(FORMULA_TILES) == 144
    assert sum(is_flower(tile) for tile in FORMULA_TILES) == 8
    assert sorted(shuffled_formula_wall(7)) == sorted(FORMULA_TILES)
    assert shuffled_formula_wall(7) == shuffled_formula_wall(7)


@pytest.mark.parametrize(
    ("indicator", "wildcard"),
    [
        ("5m", "6m"),
        ("9m", "1m"),
        ("9p", "1p"),
        ("9s", "1s"),
        ("1z", "2z"),
        ("4z", "5z"),
        ("6z", "7z"),
        ("7z", "1z"),
    ],
    ids=lambda code: f"RULES-2.1-{code}",
)
def test_the_wildcard_is_the_successor_wrapping_in_suits_and_honors(indicator: str, wildcard: str) -> None:
    assert wildcard_successor(parse_tile(indicator)) == parse_tile(wildcard)


def test_flowers_are_replaced_from_the_tail_again_when_the_replacement_is_a_flower() -> None:
    """RULES.md 2.1 补花: 1f is replaced by the last tile, 2f; that by 9s."""
    wall = Wall(tuple(parse_tiles("123m9s2f")))
    replaced = replace_flowers(parse_tiles("55m1f"), wall)
    assert replaced.hand == tuple(parse_tiles("55m9s"))
    assert replaced.flowers == tuple(parse_tiles("1f2f"))
    assert replaced.wall.remaining == 3 and replaced.wall.draw_head()[0] == parse_tile("1m")


def test_opening_a_hand_replaces_every_flower_and_turns_the_indicator() -> None:
    for seed in range(30):
        dealt = deal(shuffled_formula_wall(seed), dealer=seed % 4)
        opened = open_formula_hand(dealt, dealer=seed % 4)
        assert [len(hand) for hand in opened.hands] == [14 if seat == seed % 4 else 13 for seat in range(4)]
        assert not any(is_flower(tile) for hand in opened.hands for tile in hand)
        assert not is_flower(opened.indicator)
        assert opened.wildcard == wildcard_successor(opened.indicator)
        held = [tile for hand in opened.hands for tile in hand] + [
            tile for group in opened.flowers for tile in group
        ]
        assert len(held) + len(opened.turned_flowers) + 1 + opened.wall.remaining == 144


def test_the_bird_is_the_next_tile_skipping_flowers_or_the_winning_tile_at_the_end() -> None:
    """RULES.md 2.3."""
    assert bird_tile(Wall(tuple(parse_tiles("1f3f7p2m"))), parse_tile("5s")) == parse_tile("7p")
    assert bird_tile(Wall(tuple(parse_tiles("1f"))), parse_tile("5s")) == parse_tile("5s")
    last = Wall(tuple(parse_tiles("4m")), head_drawn=1)
    assert bird_tile(last, parse_tile("4m")) == parse_tile("4m")


@pytest.mark.parametrize(
    ("bird", "value"),
    [("1m", 1), ("9p", 9), ("5s", 5), ("1z", 1), ("4z", 4), ("5z", 5), ("6z", 6), ("7z", 7)],
)
def test_bird_values(bird: str, value: int) -> None:
    assert bird_value(parse_tile(bird)) == value


@pytest.mark.parametrize("dealer", range(4))
@pytest.mark.parametrize(
    ("bird", "offset"), [("1m", 0), ("2p", 1), ("3s", 2), ("4z", 3), ("5m", 0), ("7z", 2), ("9s", 0)]
)
def test_the_bird_lands_on_every_seat_counting_from_the_dealer(dealer: int, bird: str, offset: int) -> None:
    """RULES.md 2.3: seat (dealer + v − 1) mod 4."""
    assert bird_seat(dealer, parse_tile(bird)) == (dealer + offset) % 4


OPTIONS = FormulaOptions(coefficient=200, rake_beans=20)


def points(fact: FormulaWinFact, options: FormulaOptions = OPTIONS) -> dict[int, int]:
    return {
        instruction.payer: instruction.total_points for instruction in formula_win_instructions(fact, options)
    }


# Dealer is seat 0 unless said; "1m" lands on the dealer, "2m" on dealer+1, "3m" +2, "4m" +3.
@pytest.mark.parametrize(
    ("fact", "expected"),
    [
        pytest.param(
            FormulaWinFact("w", 1, WinBy.DISCARD, 10, 0, parse_tile("3m"), payer=2),
            {2: 20},
            id="RULES-2.3-discard-bird-on-discarder",
        ),
        pytest.param(
            FormulaWinFact("w", 1, WinBy.DISCARD, 10, 0, parse_tile("2m"), payer=2),
            {2: 20},
            id="RULES-2.3-discard-bird-on-winner",
        ),
        pytest.param(
            FormulaWinFact("w", 1, WinBy.DISCARD, 10, 0, parse_tile("4m"), payer=2),
            {2: 10},
            id="RULES-2.3-discard-bird-elsewhere",
        ),
        pytest.param(
            FormulaWinFact("w", 1, WinBy.ROB_KONG, 10, 0, parse_tile("4m"), payer=3),
            {3: 20},
            id="RULES-2.3-robbed-kong-pays-like-a-discard",
        ),
        pytest.param(
            FormulaWinFact("w", 1, WinBy.SELF_DRAW, 10, 0, parse_tile("2m")),
            {2: 20, 3: 20, 0: 40},
            id="RULES-2.3-self-draw-bird-on-winner-all-double",
        ),
        pytest.param(
            FormulaWinFact("w", 1, WinBy.SELF_DRAW, 10, 0, parse_tile("3m")),
            {2: 20, 3: 10, 0: 20},
            id="RULES-2.3-self-draw-bird-on-one-payer",
        ),
        pytest.param(
            FormulaWinFact("w", 1, WinBy.SELF_DRAW, 10, 0, parse_tile("1m")),
            {2: 10, 3: 10, 0: 40},
            id="RULES-2.3-self-draw-bird-on-dealer-payer",
        ),
        pytest.param(
            FormulaWinFact("w", 0, WinBy.DISCARD, 10, 0, parse_tile("4m"), payer=2),
            {2: 20},
            id="RULES-2.3-dealer-wins-doubles",
        ),
        pytest.param(
            FormulaWinFact("w", 1, WinBy.DISCARD, 10, 0, parse_tile("4m"), payer=0),
            {0: 20},
            id="RULES-2.3-dealer-discarder-pays-double",
        ),
        pytest.param(
            FormulaWinFact("w", 1, WinBy.DISCARD, 10, 0, parse_tile("1m"), payer=0),
            {0: 40},
            id="RULES-2.3-dealer-discarder-and-bird-on-him",
        ),
        pytest.param(
            FormulaWinFact("w", 2, WinBy.DISCARD, 10, 1, parse_tile("4m"), payer=1),
            {1: 20},
            id="RULES-2.3-dealer-discarder-seat-1",
        ),
        pytest.param(
            FormulaWinFact("w", 3, WinBy.SELF_DRAW, 10, 3, parse_tile("4m")),
            {0: 20, 1: 20, 2: 40},
            id="RULES-2.3-dealer-self-draw-bird-on-seat-2",
        ),
    ],
)
def test_birds_and_dealer_doubling(fact: FormulaWinFact, expected: dict[int, int]) -> None:
    assert points(fact) == expected
    assert all(
        line.reason is Reason.WIN and line.payee == fact.winner
        for instruction in formula_win_instructions(fact, OPTIONS)
        for line in instruction.payments
    )


@pytest.mark.parametrize(
    ("fan_term", "expected"), [(FanTerm.FAN, 27), (FanTerm.FAN_PLUS_8, 35), (FanTerm.FLAT_10, 10)]
)
def test_fan_term(fan_term: FanTerm, expected: int) -> None:
    assert fan_term_points(27, fan_term) == expected
    fact = FormulaWinFact("w", 1, WinBy.DISCARD, 27, 0, parse_tile("4m"), payer=2)
    assert points(fact, FormulaOptions(coefficient=1, rake_beans=0, fan_term=fan_term)) == {2: expected}


def test_seed_000_worked_example() -> None:
    """Seed 000: N = 200, X = 10, self-draw, A = 20: the winner +6,000, each loser −2,000, all −A.

    At four seats the dealer is always involved in a self-draw, so the example's X = 10 for every
    payer is taken as given: 10 points from each payer, converted once and raked.
    """
    options = FormulaOptions(coefficient=200, rake_beans=20)
    instructions = [Instruction(payer, (Payment(1, 10, Reason.WIN),), "w") for payer in (2, 3, 0)]
    beans = [to_beans(instruction, options.settlement_options()) for instruction in instructions]
    assert beans_by_party(beans) == {1: 6_000, 0: -2_000, 2: -2_000, 3: -2_000}
    rake = formula_rake_instructions(options, "w")
    assert beans_by_party([*beans, *rake]) == {1: 5_980, 0: -2_020, 2: -2_020, 3: -2_020, HOUSE_RAKE: 80}


def test_a_self_draw_in_beans_is_minus_x_n_per_payer_and_plus_the_sum_for_the_winner() -> None:
    """RULES.md 2.3 with the dealer (seat 0) paying double and the bird (4m) on seat 3."""
    fact = FormulaWinFact("w", 1, WinBy.SELF_DRAW, 10, 0, parse_tile("4m"))
    beans = [
        to_beans(instruction, OPTIONS.settlement_options())
        for instruction in formula_win_instructions(fact, OPTIONS)
    ]
    assert beans_by_party(beans) == {1: 10_000, 2: -2_000, 3: -4_000, 0: -4_000}


def test_escape_pays_the_house_and_each_other_player() -> None:
    """RULES.md 2.3: 16 × N to the house and 8 × N to each of the three others."""
    instruction = formula_escape_instruction("e", 2, OPTIONS)
    assert instruction is not None
    assert [(line.payee, line.points, line.reason) for line in instruction.payments] == [
        (HOUSE_ESCAPE, 16, Reason.ESCAPE_PENALTY),
        (3, 8, Reason.ESCAPE_COMPENSATION),
        (0, 8, Reason.ESCAPE_COMPENSATION),
        (1, 8, Reason.ESCAPE_COMPENSATION),
    ]
    beans = to_beans(instruction, OPTIONS.settlement_options())
    assert beans.total_beans == 40 * 200


def test_an_escapee_short_of_beans_pays_in_proportion() -> None:
    """RULES.md 2.3 (as 1.10): B = 4,000 of T = 8,000: penalty 1,600, the rest 800 each."""
    instruction = formula_escape_instruction("e", 2, OPTIONS)
    assert instruction is not None
    posted = apply_balance(to_beans(instruction, OPTIONS.settlement_options()), 4_000)
    assert [line.beans for line in posted.payments] == [1_600, 800, 800, 800]
    assert posted.total_beans == 4_000


def test_options_and_facts_are_checked() -> None:
    with pytest.raises(ValueError):
        FormulaOptions(coefficient=0, rake_beans=0)
    with pytest.raises(ValueError):
        FormulaOptions(coefficient=1, rake_beans=0, fan_term="double")  # type: ignore[arg-type]
    with pytest.raises(InvalidSettlementFactError):
        FormulaWinFact("w", 1, WinBy.DISCARD, 10, 0, parse_tile("4m"))
    with pytest.raises(InvalidSettlementFactError):
        FormulaWinFact("w", 1, WinBy.SELF_DRAW, 10, 0, parse_tile("4m"), payer=2)
