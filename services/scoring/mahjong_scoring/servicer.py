"""`ScoringService` over gRPC: the rules library (EvaluateHand, ListWaits) and each game's settlement.

EvaluateHand and ListWaits take the same fields with the same meaning as ``mjctl evaluate``: the
hand without the winning tile in compact notation, melds, the win flags; an omitted win_by means
a discard win, an empty self_draw_bonus means "double", and an empty missing_suit means the suit
absent from the hand (if any). A malformed hand (bad tile code, wrong size, a fifth copy) is
INVALID_ARGUMENT. Formula (RULES.md 2) hands take the formula-only fields (wildcard, flowers,
winds, min_fan; 0 = no minimum); a Formula wait is a tile that, won on a discard, completes a
winning hand, with its fan, meets_min, fans and what the wildcards stand for.

GetGameSettlement reads the projection: every `SettlementInstructed` line of the game in order
(reason, payees with per-line reasons, fans and multiplier), the per-seat totals, and whether the
game is settled (GameSettled emitted). Like the ledger's game statement, only the game's players and
ops/finance may read it (`METHOD_ROLES` admits every caller; the handler checks the seat).

ListSettlementInstructions (ops/finance only, `instruction_list`) pages through the instructions
of a game or a time window with the beans each asked for: what `LedgerService.Reconcile` compares
the ledger's postings with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
import sqlalchemy
from mahjong.v1 import common_pb2, scoring_service_pb2, scoring_service_pb2_grpc, settlement_events_pb2
from mahjong_platform.auth import (
    EVERY_CALLER,
    OPERATIONS_ROLES,
    Identity,
    check_roles,
    current_identity,
    role_table,
)
from mahjong_platform.database import SessionFactory, read_transaction
from mahjong_platform.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError
from mahjong_platform.grpc_server import ServiceRegistration, register_service
from mahjong_rules import (
    SUITS,
    Fan,
    Meld,
    RulesError,
    Suit,
    Tile,
    WinContext,
    evaluate_win,
    find_waits,
    parse_tile,
    parse_tiles,
    suits_held,
    tile_code,
)
from mahjong_rules.formula.evaluate_json import WINDS, evaluate_formula_request
from mahjong_rules.formula.fans import MELD_KINDS, FormulaMeld, MeldKind, ScoredFan
from mahjong_rules.formula.waits import formula_waits
from mahjong_rules.seats import EAST_WIND

from mahjong_scoring.instruction_list import list_settlement_instructions
from mahjong_scoring.models import TABLE_ID_MAX_LENGTH, scoring_games, scoring_lines, scoring_players

SERVICE_NAME = "ScoringService"
METHOD_ROLES = role_table(
    scoring_service_pb2.DESCRIPTOR.services_by_name[SERVICE_NAME],
    {
        "EvaluateHand": EVERY_CALLER,
        "ListWaits": EVERY_CALLER,
        "GetGameSettlement": EVERY_CALLER,
        "ListSettlementInstructions": OPERATIONS_ROLES,
    },
)
"""Who may call what (deny by default): GetGameSettlement checks the game's players in the handler."""
MELDS_MAX = 4
_WIN_BYS = {
    common_pb2.WIN_BY_UNSPECIFIED: "discard",
    common_pb2.WIN_BY_DISCARD: "discard",
    common_pb2.WIN_BY_SELF_DRAW: "self_draw",
    common_pb2.WIN_BY_ROB_KONG: "rob_kong",
}
_EXPOSURES = {
    common_pb2.KONG_EXPOSURE_EXPOSED: "exposed",
    common_pb2.KONG_EXPOSURE_ADDED: "added",
    common_pb2.KONG_EXPOSURE_CONCEALED: "concealed",
}


class ScoringServicer(scoring_service_pb2_grpc.ScoringServiceServicer):
    """Thin: validate the request, call the rules or read the projection, map the answer back."""

    def __init__(self, session_factory: SessionFactory) -> None:
        self._session_factory = session_factory

    def EvaluateHand(
        self, request: scoring_service_pb2.EvaluateHandRequest, context: grpc.ServicerContext
    ) -> scoring_service_pb2.EvaluateHandResponse:
        """Score a winning hand (RULES.md 1.6, 1.7): multiplier and fans, or win = false."""
        return evaluate_hand(request)

    def ListWaits(
        self, request: scoring_service_pb2.ListWaitsRequest, context: grpc.ServicerContext
    ) -> scoring_service_pb2.ListWaitsResponse:
        """The waits of a 13-tile position: Sichuan with their wait multipliers (RULES.md 1.7, 1.8),
        Formula with their fans (RULES.md 2.1, 2.2)."""
        return list_waits(request)

    def GetGameSettlement(
        self, request: scoring_service_pb2.GetGameSettlementRequest, context: grpc.ServicerContext
    ) -> scoring_service_pb2.GetGameSettlementResponse:
        """Every settlement line of a game, its totals, and whether it is settled."""
        return game_settlement(self._session_factory, request.table_id, current_identity())

    def ListSettlementInstructions(
        self, request: scoring_service_pb2.ListSettlementInstructionsRequest, context: grpc.ServicerContext
    ) -> scoring_service_pb2.ListSettlementInstructionsResponse:
        """A page of the instructions of a game or a window, with their requested beans (ops/finance)."""
        check_roles(
            f"/mahjong.v1.{SERVICE_NAME}/ListSettlementInstructions", current_identity(), OPERATIONS_ROLES
        )
        return list_settlement_instructions(self._session_factory, request)


def registration(session_factory: SessionFactory) -> ServiceRegistration:
    """The servicer's registration for `mahjong_platform.grpc_server.serve`."""
    return register_service(
        scoring_service_pb2.DESCRIPTOR.services_by_name[SERVICE_NAME],
        scoring_service_pb2_grpc.add_ScoringServiceServicer_to_server,
        ScoringServicer(session_factory),
    )


def evaluate_hand(
    request: scoring_service_pb2.EvaluateHandRequest,
) -> scoring_service_pb2.EvaluateHandResponse:
    """EvaluateHand without gRPC: the answer, or a `ServiceError` for a request it cannot answer."""
    if request.variant == common_pb2.VARIANT_FORMULA:
        return evaluate_formula_hand(request)
    _check_variant(request.variant)
    try:
        concealed = parse_tiles(request.concealed)
        melds = _melds(request.melds)
        if not request.win_tile:
            raise InvalidArgumentError("win_tile is required, e.g. '5p'")
        win_tile = parse_tile(request.win_tile)
        if request.win_by not in _WIN_BYS:
            raise InvalidArgumentError(f"unknown win_by {request.win_by}")
        if request.cap_points < 0:
            raise InvalidArgumentError(f"cap_points must be 0 (no cap) or positive, not {request.cap_points}")
        context = WinContext(
            win_by=_WIN_BYS[request.win_by],  # type: ignore[arg-type]
            after_kong=request.after_kong,
            last_tile=request.last_tile,
            first_turn=request.first_turn,
            dealer=request.dealer,
            self_draw_bonus=request.self_draw_bonus or "double",  # type: ignore[arg-type]
            cap_points=request.cap_points,
        )
        missing_suit = _missing_suit(request.missing_suit, [*concealed, win_tile], melds)
        evaluation = evaluate_win(concealed, melds, win_tile, missing_suit, context)
    except RulesError as error:
        raise InvalidArgumentError(str(error)) from error
    if evaluation is None:
        return scoring_service_pb2.EvaluateHandResponse(win=False)
    return scoring_service_pb2.EvaluateHandResponse(
        win=True,
        multiplier=evaluation.multiplier,
        fans=_fan_messages(evaluation.fans),
        points_per_payer=evaluation.points_per_payer,
    )


def evaluate_formula_hand(
    request: scoring_service_pb2.EvaluateHandRequest,
) -> scoring_service_pb2.EvaluateHandResponse:
    """A Formula hand (RULES.md 2.2) through the same evaluator as `mjctl evaluate`: total fan,
    whether it meets `min_fan` (0 = no minimum), the fans and what the wildcards stood for."""
    if request.win_by not in _WIN_BYS:
        raise InvalidArgumentError(f"unknown win_by {request.win_by}")
    if not request.win_tile:
        raise InvalidArgumentError("win_tile is required, e.g. '5p'")
    document: dict[str, Any] = {
        "variant": "formula",
        "concealed": request.concealed,
        "melds": [_formula_meld(meld) for meld in request.melds],
        "win_tile": request.win_tile,
        "win_by": _WIN_BYS[request.win_by],
        "after_kong": request.after_kong,
        "last_tile": request.last_tile,
        "fourth_tile": request.fourth_tile,
        "flowers": request.flowers,
        "min_fan": request.min_fan,
    }
    for key in ("wildcard", "seat_wind", "round_wind"):
        if getattr(request, key):
            document[key] = getattr(request, key)
    answer = evaluate_formula_request(document)
    if not answer["ok"]:
        raise InvalidArgumentError(answer["error"])
    if not answer["win"]:
        return scoring_service_pb2.EvaluateHandResponse(win=False)
    return scoring_service_pb2.EvaluateHandResponse(
        win=True,
        fan=answer["fan"],
        meets_min=answer["meets_min"],
        fans=[
            common_pb2.Fan(id=fan["id"], name=fan["name"], multiplier=fan["fan"], count=fan["count"])
            for fan in answer["fans"]
        ],
        wildcards_as=answer["wildcards_as"],
    )


def _formula_meld(meld: common_pb2.Meld) -> dict[str, str]:
    if meld.kind != "kong":
        return {"kind": meld.kind, "tile": meld.tile}
    concealed = meld.exposure == common_pb2.KONG_EXPOSURE_CONCEALED
    return {"kind": "kong", "tile": meld.tile, "exposure": "concealed" if concealed else "exposed"}


def list_waits(request: scoring_service_pb2.ListWaitsRequest) -> scoring_service_pb2.ListWaitsResponse:
    """ListWaits without gRPC: the answer, or a `ServiceError` for a request it cannot answer."""
    if request.variant == common_pb2.VARIANT_FORMULA:
        return list_formula_waits(request)
    _check_variant(request.variant)
    try:
        concealed = parse_tiles(request.concealed)
        melds = _melds(request.melds)
        waits = find_waits(concealed, melds, _missing_suit(request.missing_suit, concealed, melds))
    except RulesError as error:
        raise InvalidArgumentError(str(error)) from error
    return scoring_service_pb2.ListWaitsResponse(
        ready=waits.ready,
        waits=[
            scoring_service_pb2.Wait(
                tile=tile_code(wait.tile), multiplier=wait.multiplier, fans=_fan_messages(wait.fans)
            )
            for wait in waits.waits
        ],
    )


def list_formula_waits(
    request: scoring_service_pb2.ListWaitsRequest,
) -> scoring_service_pb2.ListWaitsResponse:
    """The waits of a Formula position (RULES.md 2.1, 2.2): each tile that, won on a discard (a
    wildcard tile at face value), completes a winning hand, never a fifth copy, in tile order, with
    its total fan (flowers included), meets_min (flowers excluded; min_fan 0 = no minimum, as in
    EvaluateHand), fans and wildcards_as. ready: any wait, whether or not it meets the minimum.
    Winds default to 1z; missing_suit is Sichuan only and ignored, as in EvaluateHand."""
    try:
        concealed = parse_tiles(request.concealed)
        melds = [_parsed_formula_meld(meld) for meld in request.melds]
        waits = formula_waits(
            concealed,
            melds,
            wildcard=parse_tile(request.wildcard) if request.wildcard else None,
            flowers=request.flowers,
            min_fan=request.min_fan,
            seat_wind=_formula_wind(request.seat_wind, "seat_wind"),
            round_wind=_formula_wind(request.round_wind, "round_wind"),
        )
    except RulesError as error:
        raise InvalidArgumentError(str(error)) from error
    return scoring_service_pb2.ListWaitsResponse(
        ready=waits.ready,
        waits=[
            scoring_service_pb2.Wait(
                tile=tile_code(wait.tile),
                fan=wait.evaluation.total_fan,
                meets_min=wait.evaluation.meets_min,
                fans=_scored_fan_messages(wait.evaluation.fans),
                wildcards_as=[tile_code(tile) for tile in wait.evaluation.wildcards_as],
            )
            for wait in waits.waits
        ],
    )


def _parsed_formula_meld(meld: common_pb2.Meld) -> FormulaMeld:
    """A request meld as EvaluateHand reads it (`_formula_meld`): chow (lowest tile), pong or kong."""
    if meld.kind not in MELD_KINDS:
        raise InvalidArgumentError(f"meld kind must be chow, pong or kong, not {meld.kind!r}")
    fields = _formula_meld(meld)
    kind: MeldKind = meld.kind  # type: ignore[assignment]  # checked against MELD_KINDS above
    return FormulaMeld(kind, parse_tile(fields["tile"]), fields.get("exposure"))  # type: ignore[arg-type]


def _formula_wind(value: str, name: str) -> Tile:
    if not value:
        return EAST_WIND
    if value not in WINDS:
        raise InvalidArgumentError(f"{name} must be one of {', '.join(WINDS)}, not {value!r}")
    return parse_tile(value)


def _scored_fan_messages(fans: Sequence[ScoredFan]) -> list[common_pb2.Fan]:
    return [common_pb2.Fan(id=fan.id, name=fan.name, multiplier=fan.fan, count=fan.count) for fan in fans]


def game_settlement(
    session_factory: SessionFactory, table_id: str, reader: Identity | None = None
) -> scoring_service_pb2.GetGameSettlementResponse:
    """GetGameSettlement without gRPC: the game's lines in order, its totals, and settled.

    ``reader`` (None: a trusted in-process caller) must be ops/finance or one of the game's players.
    """
    if not 0 < len(table_id) <= TABLE_ID_MAX_LENGTH:
        raise InvalidArgumentError(f"table_id must be 1..{TABLE_ID_MAX_LENGTH} characters")
    with read_transaction(session_factory) as session:
        game = session.execute(
            sqlalchemy.select(scoring_games.c.settled).where(scoring_games.c.table_id == table_id)
        ).first()
        if game is None:
            raise NotFoundError(
                f"scoring has no game for table {table_id!r} (not opened, or not consumed yet)"
            )
        line_rows = session.execute(
            sqlalchemy.select(scoring_lines.c.instruction)
            .where(scoring_lines.c.table_id == table_id)
            .order_by(scoring_lines.c.line)
        ).all()
        player_rows = session.execute(
            sqlalchemy.select(scoring_players)
            .where(scoring_players.c.table_id == table_id)
            .order_by(scoring_players.c.seat)
        ).all()
    players = {row.account for row in player_rows}
    if (
        reader is not None
        and not reader.has_any_role(OPERATIONS_ROLES)
        and f"player:{reader.player_id}" not in players
    ):
        raise PermissionDeniedError(
            f"player {reader.player_id!r} did not play at table {table_id!r}; "
            "only its players and ops/finance may read its settlement"
        )
    return scoring_service_pb2.GetGameSettlementResponse(
        table_id=table_id,
        lines=[
            settlement_events_pb2.SettlementInstructed.FromString(bytes(row.instruction)) for row in line_rows
        ],
        totals=[
            settlement_events_pb2.PlayerSettlement(
                account=row.account,
                seat=row.seat,
                points=row.points,
                beans=row.beans,
                rake_beans=row.rake_beans,
            )
            for row in player_rows
        ],
        settled=bool(game.settled),
    )


def _check_variant(variant: int) -> None:
    if variant != common_pb2.VARIANT_SICHUAN_BLOODY:
        raise InvalidArgumentError("variant must be VARIANT_SICHUAN_BLOODY (or VARIANT_FORMULA)")


def _melds(melds: Sequence[common_pb2.Meld]) -> list[Meld]:
    if len(melds) > MELDS_MAX:
        raise InvalidArgumentError(f"a hand has at most {MELDS_MAX} melds, got {len(melds)}")
    parsed = []
    for meld in melds:
        tile = parse_tile(meld.tile)
        if meld.kind == "pong":
            parsed.append(Meld("pong", tile))
        elif meld.kind == "kong":
            exposure = _EXPOSURES.get(meld.exposure)
            if exposure is None:
                raise InvalidArgumentError(
                    f"the kong of {meld.tile} needs exposure exposed, added or concealed"
                )
            parsed.append(Meld("kong", tile, exposure))  # type: ignore[arg-type]
        else:
            raise InvalidArgumentError(f"meld kind must be pong or kong, not {meld.kind!r}")
    return parsed


def _missing_suit(value: str, tiles: Sequence[Tile], melds: Sequence[Meld]) -> Suit | None:
    """The declared missing suit, or (as ``mjctl evaluate``) the suit absent from the hand."""
    if value:
        for suit in SUITS:
            if suit == value:
                return suit
        raise InvalidArgumentError(f"missing_suit must be m, p or s, not {value!r}")
    held = suits_held(tiles, melds)
    return next((suit for suit in SUITS if suit not in held), None)


def _fan_messages(fans: Sequence[Fan]) -> list[common_pb2.Fan]:
    return [common_pb2.Fan(id=fan.id, name=fan.name, multiplier=fan.multiplier, count=1) for fan in fans]
