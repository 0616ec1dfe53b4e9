"""``mjctl evaluate`` for the formula family (issue 6 item 5): JSON in, JSON out."""

import json
from typing import Any

from mjctl.evaluate import evaluate_line


def answer(request: dict[str, Any]) -> dict[str, Any]:
    return evaluate_line(json.dumps({"variant": "formula", **request}))


def test_a_formula_win_with_a_wildcard_reports_fans_and_the_substitution() -> None:
    result = answer({"concealed": "12345678m234p5s7z", "win_tile": "5s", "wildcard": "7z", "flowers": 2})
    assert result["ok"] is True and result["win"] is True
    assert result["wildcards_as"] == ["9m"]
    fans = {fan["id"]: fan for fan in result["fans"]}
    assert fans["pure_straight"] == {"id": "pure_straight", "name": "清龙", "fan": 16, "count": 1}
    assert fans["flower_tiles"]["count"] == 2
    assert result["fan"] == sum(fan["fan"] * fan["count"] for fan in fans.values())
    assert result["meets_min"] is True


def test_melds_winds_and_flags_reach_the_fans() -> None:
    result = answer(
        {
            "concealed": "45s77z",
            "melds": [
                {"kind": "chow", "tile": "1m"},
                {"kind": "chow", "tile": "5p"},
                {"kind": "pong", "tile": "8s"},
            ],
            "win_tile": "3s",
            "win_by": "self_draw",
            "last_tile": True,
            "seat_wind": "2z",
            "round_wind": "1z",
            "min_fan": 8,
        }
    )
    assert result["win"] is True
    assert [fan["id"] for fan in result["fans"]] == ["last_tile_draw"]


def test_no_substitution_wins() -> None:
    assert answer({"concealed": "12345678m234p55s", "win_tile": "7z", "wildcard": "7z"}) == {
        "ok": True,
        "win": False,
    }


def test_malformed_requests_answer_an_error() -> None:
    requests: list[dict[str, Any]] = [
        {"concealed": "123m", "win_tile": "5s"},
        {"concealed": "123456789m234p5s", "win_tile": "5s", "wildcard": "1f"},
        {"concealed": "123456789m234p5s", "win_tile": "5s", "seat_wind": "5z"},
        {"concealed": "123456789m234p5s", "win_tile": "5s", "extra": 1},
        {"concealed": "123456789m234p5s"},
    ]
    for request in requests:
        result = answer(request)
        assert result["ok"] is False and isinstance(result["error"], str), request


def test_waits_mode_lists_every_winning_discard_with_its_fans_rules_2_2() -> None:
    # 九莲宝灯 (nine gates): every tile of the suit wins; 1m and 9m score most.
    result = answer({"mode": "waits", "concealed": "1112345678999m", "min_fan": 0})
    assert result["ok"] is True and result["ready"] is True
    assert [wait["tile"] for wait in result["waits"]] == [f"{rank}m" for rank in range(1, 10)]
    for wait in result["waits"]:
        assert "nine_gates" in {fan["id"] for fan in wait["fans"]}
        single = answer({"concealed": "1112345678999m", "win_tile": wait["tile"], "min_fan": 0})
        assert wait["fan"] == single["fan"] and wait["meets_min"] is True


def test_waits_mode_with_a_wildcard_and_the_minimum_rules_2_1() -> None:
    result = answer({"mode": "waits", "concealed": "123456789m1p55s7z", "wildcard": "7z", "min_fan": 64})
    assert result["ready"] is True and result["waits"]
    assert all(wait["meets_min"] is False for wait in result["waits"])
    assert answer({"mode": "waits", "concealed": "1m", "win_tile": "1m"})["ok"] is False
    assert answer({"mode": "nope", "concealed": "1m"})["error"] == "mode must be win or waits, not 'nope'"
