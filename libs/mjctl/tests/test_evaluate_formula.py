"""``mjctl evaluate`` for the formula family (issue 6 item 5): JSON in, JSON out."""

import json
from typing import Any

import pytest
from mjctl.evaluate import evaluate_line


def answer(request: dict[str, Any]) -> dict[str, Any]:
    return evaluate_line(json.dumps({"variant": "formula", **request}))


# The dispatch of "variant": "formula" to mahjong_rules.formula.evaluate_json is wired in
# mjctl/evaluate.py by its owner; until then these tests are skipped, not failed.
pytestmark = pytest.mark.skipif(
    answer({"concealed": "1m", "win_tile": "1m"}).get("error") == "variant formula is not supported yet",
    reason="mjctl evaluate does not dispatch the formula variant yet",
)


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
