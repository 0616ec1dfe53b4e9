"""``mjctl evaluate``: check hands from JSON Lines on stdin, one JSON line out per line in.

Win request (RULES.md 1.6, 1.7)::

    {"variant": "sichuan_bloody", "concealed": "234678m9p", "melds": [{"kind": "pong", "tile": "5p"},
     {"kind": "kong", "tile": "7p", "exposure": "exposed"}], "win_tile": "9p", "win_by": "self_draw",
     "after_kong": false, "last_tile": false, "first_turn": false, "dealer": false,
     "missing_suit": "s", "cap_points": 0, "self_draw_bonus": "double"}

``concealed`` is the hand without the winning tile. Omitted keys default to: no melds, flags false,
``win_by`` discard, cap 0, ``double``, and ``missing_suit`` the suit absent from the hand (if any).
Answer: ``{"ok": true, "win": true, "multiplier": 16, "points_per_payer": 16, "fans": [...]}``,
``{"ok": true, "win": false}``, or ``{"ok": false, "error": "..."}`` for a malformed line, after which
the command goes on with the next line. ``points_per_payer`` applies the cap and the add_one point.

Waits request: ``{"mode": "waits", "variant": "sichuan_bloody", "concealed": ..., "melds": ...,
"missing_suit": ...}`` answers ``{"ok": true, "ready": true, "waits": [{"tile": "3m",
"multiplier": 8, "fans": [...]}]}``.
"""

import argparse
import json
import sys
from collections.abc import Iterable
from typing import IO, Any, cast

from mahjong_rules import (
    SUITS,
    Fan,
    Meld,
    MeldKind,
    RulesError,
    SelfDrawBonus,
    Suit,
    Tile,
    WinBy,
    WinContext,
    evaluate_win,
    find_waits,
    parse_tile,
    parse_tiles,
    suits_held,
    tile_code,
)

VARIANTS = ("sichuan_bloody", "formula")
WIN_KEYS = frozenset(
    {
        "mode",
        "variant",
        "concealed",
        "melds",
        "win_tile",
        "win_by",
        "after_kong",
        "last_tile",
        "first_turn",
        "dealer",
        "missing_suit",
        "cap_points",
        "self_draw_bonus",
    }
)
WAITS_KEYS = frozenset({"mode", "variant", "concealed", "melds", "missing_suit"})
FLAG_KEYS = ("after_kong", "last_tile", "first_turn", "dealer")
MAX_LINE_CHARACTERS = 10_000


class RequestError(ValueError):
    """A request line is malformed; the message says what is wrong with it."""


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add the ``evaluate`` subcommand."""
    parser = subparsers.add_parser(
        "evaluate",
        help="score hands or list waits: JSON Lines on stdin, one JSON line per input line on stdout",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    """Entry point of ``mjctl evaluate``: stdin to stdout."""
    evaluate_stream(sys.stdin, sys.stdout)
    return 0


def evaluate_stream(lines: Iterable[str], output: IO[str]) -> None:
    """Answer every input line with one output line, in order, flushing each (usable as a co-process)."""
    for line in lines:
        output.write(json.dumps(evaluate_line(line), ensure_ascii=False) + "\n")
        output.flush()


def evaluate_line(line: str) -> dict[str, Any]:
    """The answer to one JSON line; never raises for bad input (it answers ``ok: false`` instead)."""
    try:
        if len(line) > MAX_LINE_CHARACTERS:
            raise RequestError(f"line longer than {MAX_LINE_CHARACTERS} characters")
        try:
            request = json.loads(line)
        except json.JSONDecodeError as error:
            raise RequestError(f"not JSON: {error}") from None
        return evaluate_request(request)
    except (RequestError, RulesError) as error:
        return {"ok": False, "error": str(error)}


def evaluate_request(request: object) -> dict[str, Any]:
    """The answer to one decoded request; raises ``RequestError`` or ``RulesError`` when malformed."""
    if not isinstance(request, dict):
        raise RequestError("a request must be a JSON object")
    variant = request.get("variant")
    if variant not in VARIANTS:
        raise RequestError(f"variant must be one of {', '.join(VARIANTS)}, not {variant!r}")
    if variant == "formula":
        from mahjong_rules.formula.evaluate_json import evaluate_formula_request

        return evaluate_formula_request(request)
    mode = request.get("mode", "win")
    if mode == "waits":
        return _waits(request)
    if mode == "win":
        return _win(request)
    raise RequestError(f"mode must be win or waits, not {mode!r}")


def _win(request: dict[str, Any]) -> dict[str, Any]:
    _reject_unknown_keys(request, WIN_KEYS)
    concealed = _tiles(request, "concealed")
    melds = _melds(request.get("melds", []))
    if "win_tile" not in request:
        raise RequestError("missing key: win_tile")
    win_tile = _tile(request["win_tile"], "win_tile")
    missing_suit = _missing_suit(request, [*concealed, win_tile], melds)
    flags = {key: _boolean(request, key) for key in FLAG_KEYS}
    cap_points = request.get("cap_points", 0)
    if not isinstance(cap_points, int) or isinstance(cap_points, bool) or cap_points < 0:
        raise RequestError(f"cap_points must be a non-negative integer, not {cap_points!r}")
    context = WinContext(
        win_by=cast(WinBy, _string(request, "win_by", "discard")),
        self_draw_bonus=cast(SelfDrawBonus, _string(request, "self_draw_bonus", "double")),
        cap_points=cap_points,
        **flags,
    )
    evaluation = evaluate_win(concealed, melds, win_tile, missing_suit, context)
    if evaluation is None:
        return {"ok": True, "win": False}
    return {
        "ok": True,
        "win": True,
        "multiplier": evaluation.multiplier,
        "points_per_payer": evaluation.points_per_payer,
        "fans": _fans(evaluation.fans),
    }


def _waits(request: dict[str, Any]) -> dict[str, Any]:
    _reject_unknown_keys(request, WAITS_KEYS)
    concealed = _tiles(request, "concealed")
    melds = _melds(request.get("melds", []))
    missing_suit = _missing_suit(request, concealed, melds)
    result = find_waits(concealed, melds, missing_suit)
    waits = [
        {"tile": tile_code(wait.tile), "multiplier": wait.multiplier, "fans": _fans(wait.fans)}
        for wait in result.waits
    ]
    return {"ok": True, "ready": result.ready, "waits": waits}


def _fans(fans: tuple[Fan, ...]) -> list[dict[str, Any]]:
    return [{"id": fan.id, "name": fan.name, "multiplier": fan.multiplier} for fan in fans]


def _reject_unknown_keys(request: dict[str, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(set(request) - allowed)
    if unknown:
        raise RequestError(f"unknown key(s): {', '.join(unknown)}")


def _string(request: dict[str, Any], key: str, default: str) -> str:
    value = request.get(key, default)
    if not isinstance(value, str):
        raise RequestError(f"{key} must be a string, not {value!r}")
    return value


def _boolean(request: dict[str, Any], key: str) -> bool:
    value = request.get(key, False)
    if not isinstance(value, bool):
        raise RequestError(f"{key} must be true or false, not {value!r}")
    return value


def _tiles(request: dict[str, Any], key: str) -> list[Tile]:
    if key not in request:
        raise RequestError(f"missing key: {key}")
    value = request[key]
    if not isinstance(value, str):
        raise RequestError(f"{key} must be a string of tiles like '123m55p', not {value!r}")
    return parse_tiles(value)


def _tile(value: object, what: str) -> Tile:
    if not isinstance(value, str):
        raise RequestError(f"{what} must be a tile code like '5p', not {value!r}")
    return parse_tile(value)


def _melds(value: object) -> list[Meld]:
    if not isinstance(value, list):
        raise RequestError("melds must be a list of objects")
    melds: list[Meld] = []
    for item in value:
        if not isinstance(item, dict):
            raise RequestError(f"a meld must be an object, not {item!r}")
        unknown = sorted(set(item) - {"kind", "tile", "exposure"})
        if unknown:
            raise RequestError(f"unknown meld key(s): {', '.join(unknown)}")
        kind = item.get("kind")
        exposure = item.get("exposure")
        if kind == "pong" and exposure == "exposed":
            exposure = None  # a pong is always exposed; accept the redundant word
        if kind not in ("pong", "kong"):
            raise RequestError(f"meld kind must be pong or kong, not {kind!r}")
        melds.append(Meld(cast(MeldKind, kind), _tile(item.get("tile"), "meld tile"), exposure))
    return melds


def _missing_suit(request: dict[str, Any], tiles: list[Tile], melds: list[Meld]) -> Suit | None:
    if "missing_suit" in request:
        value = request["missing_suit"]
        if value not in SUITS:
            raise RequestError(f"missing_suit must be m, p or s, not {value!r}")
        missing: Suit = value
        return missing
    held = suits_held(tiles, melds)
    return next((suit for suit in SUITS if suit not in held), None)
