"""The ``mjctl evaluate`` JSON form of the formula family (issue 6 item 5).

Request (``concealed`` is the hand without the winning tile; a chow meld names its lowest tile)::

    {"variant": "formula", "concealed": "123456789m23p5s", "melds": [{"kind": "chow", "tile": "1s"}],
     "win_tile": "4p", "win_by": "discard", "after_kong": false, "last_tile": false,
     "wildcard": "5m", "flowers": 0, "fourth_tile": false, "seat_wind": "1z", "round_wind": "1z",
     "min_fan": 8}

Omitted keys default to: no melds, flags false, ``win_by`` discard, winds 1z, ``flowers`` 0,
``min_fan`` 8, and no ``wildcard`` (plain MCR, no 无财神). Answer::

    {"ok": true, "win": true, "fan": 27, "meets_min": true,
     "fans": [{"id": "pure_straight", "name": "清龙", "fan": 16, "count": 1}, ...],
     "wildcards_as": ["3m"]}

``{"ok": true, "win": false}`` when no substitution makes a winning hand, and
``{"ok": false, "error": "..."}`` for a malformed request. ``fan`` includes flowers; ``meets_min``
does not count them.

Waits (``"mode": "waits"``; no ``win_tile``, ``win_by`` or flags): the tiles that win on a
discard (``mahjong_rules.formula.waits``), each scored as above::

    {"ok": true, "ready": true,
     "waits": [{"tile": "3m", "fan": 12, "meets_min": true, "fans": [...], "wildcards_as": []}, ...]}
"""

from typing import Any, cast

from mahjong_rules.errors import RulesError
from mahjong_rules.formula.fans import MELD_KINDS, FormulaMeld, FormulaWinContext, MeldKind, WinBy
from mahjong_rules.formula.waits import formula_waits
from mahjong_rules.formula.wildcards import FormulaEvaluation, evaluate_formula_win
from mahjong_rules.tiles import Tile, parse_tile, parse_tiles, tile_code

REQUEST_KEYS = frozenset(
    {
        "mode",
        "variant",
        "concealed",
        "melds",
        "win_tile",
        "win_by",
        "after_kong",
        "last_tile",
        "wildcard",
        "flowers",
        "fourth_tile",
        "seat_wind",
        "round_wind",
        "min_fan",
    }
)
FLAG_KEYS = ("after_kong", "last_tile", "fourth_tile")
MELD_KEYS = frozenset({"kind", "tile", "exposure"})
WINDS = ("1z", "2z", "3z", "4z")


class FormulaRequestError(ValueError):
    """A formula request is malformed; the message says what is wrong."""


def evaluate_formula_request(request: dict[str, Any]) -> dict[str, Any]:
    """Answer one decoded formula request; never raises for bad input (answers ``ok: false``)."""
    try:
        return _evaluate(request)
    except (FormulaRequestError, RulesError) as error:
        return {"ok": False, "error": str(error)}


def _evaluate(request: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(request, dict):
        raise FormulaRequestError("a request must be a JSON object")
    unknown = sorted(set(request) - REQUEST_KEYS)
    if unknown:
        raise FormulaRequestError(f"unknown key(s): {', '.join(unknown)}")
    if request.get("variant") != "formula":
        raise FormulaRequestError(f"variant must be formula, not {request.get('variant')!r}")
    mode = request.get("mode", "win")
    if mode == "waits":
        return _waits(request)
    if mode != "win":
        raise FormulaRequestError(f"mode must be win or waits, not {mode!r}")
    concealed = _tiles(request)
    melds = _melds(request.get("melds", []))
    if "win_tile" not in request:
        raise FormulaRequestError("missing key: win_tile")
    win_tile = _tile(request["win_tile"], "win_tile")
    wildcard = _tile(request["wildcard"], "wildcard") if "wildcard" in request else None
    win_by = request.get("win_by", "discard")
    if win_by not in tuple(WinBy):
        raise FormulaRequestError(f"win_by must be self_draw, discard or rob_kong, not {win_by!r}")
    context = FormulaWinContext(
        win_by=WinBy(win_by),
        seat_wind=_wind(request, "seat_wind"),
        round_wind=_wind(request, "round_wind"),
        **{key: _boolean(request, key) for key in FLAG_KEYS},
    )
    evaluation = evaluate_formula_win(
        concealed,
        melds,
        win_tile,
        context,
        wildcard=wildcard,
        flowers=_count(request, "flowers", 0),
        min_fan=_count(request, "min_fan", 8),
    )
    if evaluation is None:
        return {"ok": True, "win": False}
    return {"ok": True, "win": True, **_scored(evaluation)}


WAITS_KEYS = frozenset(
    {"mode", "variant", "concealed", "melds", "wildcard", "flowers", "seat_wind", "round_wind", "min_fan"}
)


def _waits(request: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(request) - WAITS_KEYS)
    if unknown:
        raise FormulaRequestError(f"unknown key(s) for mode waits: {', '.join(unknown)}")
    found = formula_waits(
        _tiles(request),
        _melds(request.get("melds", [])),
        wildcard=_tile(request["wildcard"], "wildcard") if "wildcard" in request else None,
        flowers=_count(request, "flowers", 0),
        min_fan=_count(request, "min_fan", 8),
        seat_wind=_wind(request, "seat_wind"),
        round_wind=_wind(request, "round_wind"),
    )
    return {
        "ok": True,
        "ready": found.ready,
        "waits": [{"tile": tile_code(wait.tile), **_scored(wait.evaluation)} for wait in found.waits],
    }


def _scored(evaluation: FormulaEvaluation) -> dict[str, Any]:
    return {
        "fan": evaluation.total_fan,
        "meets_min": evaluation.meets_min,
        "fans": [
            {"id": fan.id, "name": fan.name, "fan": fan.fan, "count": fan.count} for fan in evaluation.fans
        ],
        "wildcards_as": [tile_code(tile) for tile in evaluation.wildcards_as],
    }


def _tiles(request: dict[str, Any]) -> list[Tile]:
    if "concealed" not in request:
        raise FormulaRequestError("missing key: concealed")
    value = request["concealed"]
    if not isinstance(value, str):
        raise FormulaRequestError(f"concealed must be a string of tiles like '123m55p', not {value!r}")
    return parse_tiles(value)


def _tile(value: object, what: str) -> Tile:
    if not isinstance(value, str):
        raise FormulaRequestError(f"{what} must be a tile code like '5p', not {value!r}")
    return parse_tile(value)


def _wind(request: dict[str, Any], key: str) -> Tile:
    value = request.get(key, "1z")
    if value not in WINDS:
        raise FormulaRequestError(f"{key} must be one of {', '.join(WINDS)}, not {value!r}")
    return parse_tile(value)


def _boolean(request: dict[str, Any], key: str) -> bool:
    value = request.get(key, False)
    if not isinstance(value, bool):
        raise FormulaRequestError(f"{key} must be true or false, not {value!r}")
    return value


def _count(request: dict[str, Any], key: str, default: int) -> int:
    value = request.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise FormulaRequestError(f"{key} must be a non-negative integer, not {value!r}")
    return value


def _melds(value: object) -> list[FormulaMeld]:
    if not isinstance(value, list):
        raise FormulaRequestError("melds must be a list of objects")
    melds: list[FormulaMeld] = []
    for item in value:
        if not isinstance(item, dict):
            raise FormulaRequestError(f"a meld must be an object, not {item!r}")
        unknown = sorted(set(item) - MELD_KEYS)
        if unknown:
            raise FormulaRequestError(f"unknown meld key(s): {', '.join(unknown)}")
        kind = item.get("kind")
        if kind not in MELD_KINDS:
            raise FormulaRequestError(f"meld kind must be chow, pong or kong, not {kind!r}")
        exposure = item.get("exposure")
        if kind in ("pong", "chow") and exposure == "exposed":
            exposure = None  # a pong or chow is always exposed; accept the redundant word
        melds.append(FormulaMeld(cast(MeldKind, kind), _tile(item.get("tile"), "meld tile"), exposure))
    return melds
