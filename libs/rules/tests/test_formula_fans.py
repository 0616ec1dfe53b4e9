"""Formula fans (RULES.md 2.2): every one of the 81 MCR fans at least once, with its exclusions.

Each case names the fan it shows (the test id cites RULES.md 2.2 and the fan), the fans that must
be scored with it, and the fans its exclusion rules (不重复, 不计…) must leave out.
"""

from dataclasses import dataclass, field
from typing import cast

import pytest
from mahjong_rules.formula.fans import (
    FANS_BY_ID,
    STANDARD_FANS,
    FormulaMeld,
    FormulaWinContext,
    MeldKind,
    WinBy,
)
from mahjong_rules.formula.wildcards import evaluate_formula_win
from mahjong_rules.hand import KongExposure
from mahjong_rules.tiles import parse_tile, parse_tiles


def melds_from(text: str) -> list[FormulaMeld]:
    """``"chow 1s, pong 5p, kong 7p concealed"`` -> melds (a kong without a word is exposed)."""
    melds: list[FormulaMeld] = []
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        words = part.split()
        exposure = (
            cast(KongExposure, words[2] if len(words) > 2 else "exposed") if words[0] == "kong" else None
        )
        melds.append(FormulaMeld(cast(MeldKind, words[0]), parse_tile(words[1]), exposure))
    return melds


SELF_DRAW = FormulaWinContext(win_by=WinBy.SELF_DRAW)


@dataclass(frozen=True)
class Case:
    fan: str
    concealed: str
    win_tile: str
    melds: str = ""
    context: FormulaWinContext = field(default_factory=FormulaWinContext)
    also: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()
    count: int = 1
    flowers: int = 0


CASES = [
    # 88
    Case(
        "big_four_winds",
        "111222333444z5m",
        "5m",
        excluded=(
            "big_three_winds",
            "all_pungs",
            "prevalent_wind",
            "seat_wind",
            "pung_of_terminals_or_honors",
            "little_four_winds",
        ),
    ),
    Case(
        "big_three_dragons",
        "555666777z123m5p",
        "5p",
        excluded=("dragon_pung", "two_dragon_pungs", "little_three_dragons"),
    ),
    Case("all_green", "234234666888s6z", "6z", excluded=("half_flush",)),
    Case("nine_gates", "1112345678999m", "5m", excluded=("full_flush", "concealed_hand", "no_honors")),
    Case(
        "four_kongs",
        "5p",
        "5p",
        "kong 1m, kong 2p, kong 3s, kong 4z",
        excluded=("single_wait", "all_pungs", "three_kongs", "two_melded_kongs", "melded_kong"),
    ),
    Case(
        "seven_shifted_pairs",
        "2233445566778m",
        "8m",
        excluded=("seven_pairs", "full_flush", "concealed_hand", "single_wait"),
    ),
    Case(
        "thirteen_orphans", "19m19p19s1234567z", "1m", excluded=("all_types", "concealed_hand", "single_wait")
    ),
    # 64
    Case(
        "all_terminals",
        "111999m111999p1s",
        "1s",
        excluded=(
            "all_pungs",
            "no_honors",
            "pung_of_terminals_or_honors",
            "all_terminals_and_honors",
            "outside_hand",
        ),
    ),
    Case(
        "little_four_winds",
        "11122233344z12m",
        "3m",
        excluded=("big_three_winds", "pung_of_terminals_or_honors"),
    ),
    Case("little_three_dragons", "55566677z123m45p", "6p", excluded=("dragon_pung", "two_dragon_pungs")),
    Case(
        "all_honors",
        "1112223335556z",
        "6z",
        excluded=("all_pungs", "pung_of_terminals_or_honors", "all_terminals_and_honors"),
    ),
    Case(
        "four_concealed_pungs",
        "111777m333p555s9p",
        "9p",
        excluded=("concealed_hand", "all_pungs", "three_concealed_pungs"),
    ),
    Case(
        "pure_terminal_chows",
        "1122337788995m",
        "5m",
        excluded=("seven_pairs", "full_flush", "all_chows", "pure_double_chow", "two_terminal_chows"),
    ),
    # 48
    Case(
        "quadruple_chow",
        "111122223333m5p",
        "5p",
        excluded=("pure_shifted_pungs", "pure_double_chow", "tile_hog", "pure_triple_chow"),
    ),
    Case(
        "four_pure_shifted_pungs",
        "111222333444m5p",
        "5p",
        excluded=("pure_shifted_pungs", "all_pungs", "pure_triple_chow"),
    ),
    # 32
    Case("four_pure_shifted_chows", "123234345456m9p", "9p", excluded=("pure_shifted_chows",)),
    Case(
        "three_kongs",
        "123s5z",
        "5z",
        "kong 1m, kong 5p, kong 9s",
        excluded=("two_melded_kongs", "melded_kong"),
    ),
    Case(
        "all_terminals_and_honors",
        "111m999p111222z9s",
        "9s",
        excluded=("all_pungs", "pung_of_terminals_or_honors", "outside_hand"),
    ),
    # 24
    Case("seven_pairs", "1133m5577p2299s1z", "1z", excluded=("concealed_hand", "single_wait")),
    Case(
        "greater_honors_and_knitted_tiles",
        "1234567z147m25p3s",
        "6s",
        excluded=("lesser_honors_and_knitted_tiles", "all_types", "concealed_hand", "single_wait"),
    ),
    Case("all_even_pungs", "222888m444p666s2p", "2p", excluded=("all_pungs", "all_simples")),
    Case("full_flush", "1233456667899m", "9m", excluded=("one_voided_suit", "no_honors")),
    Case(
        "pure_triple_chow",
        "123m789p5s",
        "5s",
        "chow 1m, chow 1m",
        excluded=("pure_shifted_pungs", "pure_double_chow"),
    ),
    Case("pure_shifted_pungs", "333444m789p5s", "5s", "pong 2m", excluded=("pure_triple_chow",)),
    Case("upper_tiles", "789777m789p789s9p", "9p", excluded=("upper_four", "no_honors")),
    Case("middle_tiles", "456555m456p456s6p", "6p", excluded=("all_simples",)),
    Case("lower_tiles", "123333m123p123s2p", "2p", excluded=("lower_four", "no_honors")),
    # 16
    Case(
        "pure_straight",
        "123456789m234p5s",
        "5s",
        also=("concealed_hand", "all_chows", "single_wait"),
        excluded=("short_straight", "two_terminal_chows"),
    ),
    Case(
        "three_suited_terminal_chows",
        "123789m123789p5s",
        "5s",
        excluded=("all_chows", "mixed_double_chow", "two_terminal_chows", "no_honors"),
    ),
    Case("pure_shifted_chows", "123345567m789p5s", "5s"),
    Case("all_fives", "456m555p345456s5m", "5m", excluded=("all_simples",)),
    Case("triple_pung", "222789m222p222s5s", "5s", excluded=("double_pung",)),
    Case("three_concealed_pungs", "111m555p999s5z", "5z", "chow 1s", excluded=("two_concealed_pungs",)),
    # 12
    Case(
        "lesser_honors_and_knitted_tiles",
        "147m258p36s12345z",
        "9s",
        also=("knitted_straight",),
        excluded=("all_types", "concealed_hand", "single_wait"),
    ),
    Case("knitted_straight", "147m258p369s111z5z", "5z"),
    Case("upper_four", "6789m777789p666s", "9m", excluded=("no_honors",)),
    Case("lower_four", "1233m111234p444s", "3m", excluded=("no_honors",)),
    Case("big_three_winds", "111222333z123m5p", "5p", excluded=("pung_of_terminals_or_honors",)),
    # 8
    Case("mixed_straight", "123m456p789s111z5s", "5s"),
    Case("reversible_tiles", "1233459p456s777z", "9p", excluded=("one_voided_suit",)),
    Case("mixed_triple_chow", "123789m1235p123s", "5p", excluded=("mixed_double_chow",)),
    Case("mixed_shifted_pungs", "111789m222p333s5p", "5p"),
    Case("chicken_hand", "45s77z", "3s", "chow 1m, chow 5p, pong 8s"),
    Case(
        "last_tile_draw",
        "45s77z",
        "3s",
        "chow 1m, chow 5p, pong 8s",
        FormulaWinContext(win_by=WinBy.SELF_DRAW, last_tile=True),
        excluded=("self_drawn", "chicken_hand"),
    ),
    Case(
        "last_tile_claim",
        "45s77z",
        "3s",
        "chow 1m, chow 5p, pong 8s",
        FormulaWinContext(last_tile=True),
        excluded=("chicken_hand",),
    ),
    Case(
        "out_with_replacement_tile",
        "45s77z",
        "3s",
        "chow 1m, kong 5p, pong 8s",
        FormulaWinContext(win_by=WinBy.SELF_DRAW, after_kong=True),
        excluded=("self_drawn",),
    ),
    Case(
        "robbing_the_kong",
        "45s77z",
        "3s",
        "chow 1m, chow 5p, pong 8s",
        FormulaWinContext(win_by=WinBy.ROB_KONG, fourth_tile=True),
        excluded=("last_tile",),
    ),
    # 6
    Case("all_pungs", "999s333z5z", "5z", "pong 1m, pong 5p"),
    Case("half_flush", "123345678m111z5z", "5z"),
    Case("mixed_shifted_chows", "123789m234p345s5p", "5p"),
    Case("all_types", "123m456p234s111z5z", "5z"),
    Case("melded_hand", "2m", "2m", "chow 1m, chow 4p, pong 9s, pong 5z", excluded=("single_wait",)),
    Case(
        "two_concealed_kongs",
        "123s456s5z",
        "5z",
        "kong 1m concealed, kong 5p concealed",
        excluded=("concealed_kong",),
    ),
    Case("two_dragon_pungs", "555666z123m456p9s", "9s", excluded=("dragon_pung",)),
    # 4
    Case("outside_hand", "123789m111p789s9s", "9s"),
    Case(
        "fully_concealed_hand",
        "123456m234p678s5s",
        "5s",
        context=SELF_DRAW,
        excluded=("self_drawn", "concealed_hand"),
    ),
    Case("two_melded_kongs", "123s456s5z", "5z", "kong 1m, kong 5p", excluded=("melded_kong",)),
    Case("last_tile", "45s77z", "3s", "chow 1m, chow 5p, pong 8s", FormulaWinContext(fourth_tile=True)),
    # 2
    Case("dragon_pung", "555z123456m234p9s", "9s"),
    Case(
        "prevalent_wind",
        "222z123456m234p9s",
        "9s",
        context=FormulaWinContext(round_wind=parse_tile("2z")),
        excluded=("seat_wind",),
    ),
    Case(
        "seat_wind",
        "333z123456m234p9s",
        "9s",
        context=FormulaWinContext(seat_wind=parse_tile("3z")),
        excluded=("prevalent_wind",),
    ),
    Case("concealed_hand", "123456m234p678s5s", "5s"),
    Case("all_chows", "123456m234p678s5s", "5s"),
    Case("tile_hog", "111123m456p789s5p", "5p"),
    Case("double_pung", "222789m222p567s5z", "5z"),
    Case("two_concealed_pungs", "111m555p789s5z", "5z", "chow 1s"),
    Case("concealed_kong", "123m456p789s5z", "5z", "kong 9m concealed"),
    Case("all_simples", "234345m456p678s8s", "8s"),
    # 1
    Case("pure_double_chow", "112233m456p789s5z", "5z"),
    Case("mixed_double_chow", "123m123p789s111z5z", "5z"),
    Case("short_straight", "123456m111p789s5z", "5z"),
    Case("two_terminal_chows", "123789m111p345s5z", "5z"),
    Case("pung_of_terminals_or_honors", "999m111p456s234s5m", "5m", count=2),
    Case("melded_kong", "123m456p789s5z", "5z", "kong 2z"),
    Case("one_voided_suit", "123456m234p678p5p", "5p"),
    Case("no_honors", "123456m222p678s5s", "5s"),
    Case("edge_wait", "12m456p789s234s77z", "3m"),
    Case("closed_wait", "13m456p789s234s77z", "2m"),
    Case("single_wait", "123m456p789s234s7z", "7z"),
    Case("self_drawn", "45s77z", "3s", "chow 1m, chow 5p, pong 8s", SELF_DRAW),
    Case("flower_tiles", "123456789m234p5s", "5s", flowers=3, count=3),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: f"RULES-2.2-{case.fan}-{FANS_BY_ID[case.fan].name}")
def test_each_standard_fan_is_scored_with_its_exclusions(case: Case) -> None:
    evaluation = evaluate_formula_win(
        parse_tiles(case.concealed),
        melds_from(case.melds),
        parse_tile(case.win_tile),
        case.context,
        flowers=case.flowers,
    )
    assert evaluation is not None, "the hand is a win"
    counts = {fan.id: fan.count for fan in evaluation.fans}
    assert counts.get(case.fan) == case.count, counts
    for fan_id in case.also:
        assert fan_id in counts, counts
    for fan_id in case.excluded:
        assert fan_id not in counts, f"{fan_id} is excluded by {case.fan}: {counts}"
    for fan in evaluation.fans:
        assert fan.fan == FANS_BY_ID[fan.id].fan, "standard values"
    assert evaluation.total_fan == sum(fan.fan * fan.count for fan in evaluation.fans)


def test_the_cases_cover_all_81_standard_fans() -> None:
    assert {case.fan for case in CASES} == {fan.id for fan in STANDARD_FANS}


def test_the_fan_table_has_81_unique_ids_and_names_with_standard_values() -> None:
    assert len(STANDARD_FANS) == 81
    assert len({fan.id for fan in STANDARD_FANS}) == 81
    assert len({fan.name for fan in STANDARD_FANS}) == 81
    values = [fan.fan for fan in STANDARD_FANS]
    assert values == sorted(values, reverse=True)
    assert {value: values.count(value) for value in set(values)} == {
        88: 7,
        64: 6,
        48: 2,
        32: 3,
        24: 9,
        16: 6,
        12: 5,
        8: 9,
        6: 7,
        4: 4,
        2: 10,
        1: 13,
    }
    assert FANS_BY_ID["pure_straight"].name == "清龙" and FANS_BY_ID["pure_straight"].fan == 16


def fan_counts(
    concealed: str, win_tile: str, melds: str = "", context: FormulaWinContext | None = None
) -> dict[str, int]:
    evaluation = evaluate_formula_win(
        parse_tiles(concealed), melds_from(melds), parse_tile(win_tile), context
    )
    assert evaluation is not None
    return {fan.id: fan.count for fan in evaluation.fans}


@pytest.mark.parametrize(
    ("concealed", "win_tile", "melds", "present", "absent"),
    [
        pytest.param(
            "147m258p369s1z",
            "1z",
            "pong 5z",
            "knitted_straight",
            "concealed_hand",
            id="RULES-2.2-组合龙-with-a-meld",
        ),
        pytest.param(
            "147m369p258s123m5z", "5z", "", "knitted_straight", "", id="RULES-2.2-组合龙-other-arrangement"
        ),
        pytest.param(
            "147m258p369s1234z",
            "5z",
            "",
            "lesser_honors_and_knitted_tiles",
            "greater_honors_and_knitted_tiles",
            id="RULES-2.2-全不靠-with-组合龙",
        ),
        pytest.param(
            "1234567z147m258p",
            "9s",
            "",
            "greater_honors_and_knitted_tiles",
            "lesser_honors_and_knitted_tiles",
            id="RULES-2.2-七星不靠",
        ),
        pytest.param(
            "19m19p19s1234577z", "6z", "", "thirteen_orphans", "seven_pairs", id="RULES-2.2-十三幺-pair-held"
        ),
        pytest.param(
            "2233445566779m", "9m", "", "seven_pairs", "seven_shifted_pairs", id="RULES-2.2-七对-not-连七对"
        ),
        pytest.param("1122334455667p", "7p", "", "seven_shifted_pairs", "seven_pairs", id="RULES-2.2-连七对"),
        pytest.param("1112345678999m", "1m", "", "nine_gates", "full_flush", id="RULES-2.2-九莲宝灯-on-1"),
        pytest.param("1112345678999s", "9s", "", "nine_gates", "full_flush", id="RULES-2.2-九莲宝灯-on-9"),
        pytest.param(
            "1122337788995p", "5p", "", "pure_terminal_chows", "seven_pairs", id="RULES-2.2-一色双龙会"
        ),
        pytest.param(
            "123s456s5z",
            "5z",
            "kong 1m concealed, kong 5p",
            "concealed_kong",
            "two_melded_kongs",
            id="RULES-2.2-暗杠+明杠",
        ),
    ],
)
def test_hard_hands(concealed: str, win_tile: str, melds: str, present: str, absent: str) -> None:
    counts = fan_counts(concealed, win_tile, melds)
    assert present in counts, counts
    if absent:
        assert absent not in counts, counts


def test_a_concealed_and_a_melded_kong_score_the_standard_2_plus_1_not_the_calculators_5() -> None:
    counts = fan_counts("123s456s5z", "5z", "kong 1m concealed, kong 5p")
    assert counts["concealed_kong"] == 1 and counts["melded_kong"] == 1


def test_a_hand_that_is_not_a_win_scores_nothing() -> None:
    assert evaluate_formula_win(parse_tiles("123456789m234p5s"), [], parse_tile("6s")) is None
