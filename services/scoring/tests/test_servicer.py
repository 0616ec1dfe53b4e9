"""ScoringService over a real in-process gRPC server: the rules over gRPC and a game's settlement."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import grpc
import pytest
import sqlalchemy
from mahjong.v1 import common_pb2, scoring_service_pb2, scoring_service_pb2_grpc
from mahjong_platform.auth import AuthInterceptor, mint_token
from mahjong_platform.config import load_settings
from mahjong_platform.database import SessionFactory, transaction
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_client import open_channel
from mahjong_platform.grpc_server import serve
from mahjong_platform.tracked_consumer import MessagePosition
from mahjong_scoring.models import scoring_lines
from mahjong_scoring.projection import SettlementProjection
from mahjong_scoring.servicer import METHOD_ROLES, registration
from mahjong_scoring.testing import TableScript, room_rules

SICHUAN = common_pb2.VARIANT_SICHUAN_BLOODY


SECRET = "scoring-service-test-secret-0123456789abcdef"
StubFor = Callable[..., scoring_service_pb2_grpc.ScoringServiceStub]


@pytest.fixture
def stub_for(session_factory: SessionFactory) -> Iterator[StubFor]:
    """A stub calling as ``player_id`` with ``roles`` on a server with the scoring role table."""
    running = serve(
        [registration(session_factory)],
        "127.0.0.1:0",
        load_settings({"MAHJONG_JWT_SECRET": SECRET}),
        interceptors=[AuthInterceptor(SECRET, METHOD_ROLES)],
    )
    channels: list[grpc.Channel] = []

    def stub_for(player_id: str, roles: tuple[str, ...] = ()) -> scoring_service_pb2_grpc.ScoringServiceStub:
        channels.append(open_channel(f"127.0.0.1:{running.port}", mint_token(SECRET, player_id, roles)))
        return scoring_service_pb2_grpc.ScoringServiceStub(channels[-1])

    try:
        yield stub_for
    finally:
        for channel in channels:
            channel.close()
        running.stop(0)


@pytest.fixture
def stub(stub_for: StubFor) -> scoring_service_pb2_grpc.ScoringServiceStub:
    return stub_for("p1")


def test_evaluate_hand_scores_like_mjctl_evaluate(stub: scoring_service_pb2_grpc.ScoringServiceStub) -> None:
    response = stub.EvaluateHand(
        scoring_service_pb2.EvaluateHandRequest(
            variant=SICHUAN,
            concealed="234678m9p",
            melds=[
                common_pb2.Meld(kind="pong", tile="5p"),
                common_pb2.Meld(kind="kong", tile="7p", exposure=common_pb2.KONG_EXPOSURE_EXPOSED),
            ],
            win_tile="9p",
            win_by=common_pb2.WIN_BY_SELF_DRAW,
        )
    )
    assert response.win
    assert [(fan.id, fan.multiplier) for fan in response.fans] == [
        ("plain", 1),
        ("root", 2),
        ("self_draw", 2),
    ]
    assert response.multiplier == 4
    assert response.points_per_payer == 4  # the default self-draw bonus doubles: no extra point


def test_evaluate_hand_points_per_payer_has_the_cap_and_the_add_one_point_rules_1_9(
    stub: scoring_service_pb2_grpc.ScoringServiceStub,
) -> None:
    response = stub.EvaluateHand(
        scoring_service_pb2.EvaluateHandRequest(
            variant=SICHUAN,
            concealed="1111335577m99m2m",
            win_tile="2m",
            win_by=common_pb2.WIN_BY_SELF_DRAW,
            self_draw_bonus="add_one",
            cap_points=8,
        )
    )
    assert (response.multiplier, response.points_per_payer) == (32, 9)  # capped at 8, plus 1


def test_evaluate_hand_answers_no_win_and_rejects_bad_tiles(
    stub: scoring_service_pb2_grpc.ScoringServiceStub,
) -> None:
    no_win = stub.EvaluateHand(
        scoring_service_pb2.EvaluateHandRequest(variant=SICHUAN, concealed="13579m2468p1357s", win_tile="9p")
    )
    assert not no_win.win
    with pytest.raises(grpc.RpcError) as error:
        stub.EvaluateHand(
            scoring_service_pb2.EvaluateHandRequest(variant=SICHUAN, concealed="12x", win_tile="1m")
        )
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_evaluate_hand_scores_a_formula_hand_like_mjctl_evaluate_rules_2_2(
    stub: scoring_service_pb2_grpc.ScoringServiceStub,
) -> None:
    response = stub.EvaluateHand(
        scoring_service_pb2.EvaluateHandRequest(
            variant=common_pb2.VARIANT_FORMULA,
            concealed="123456789m1122p",
            win_tile="2p",
            win_by=common_pb2.WIN_BY_SELF_DRAW,
            min_fan=8,
        )
    )
    assert response.win and response.meets_min
    assert ("pure_straight", "清龙", 16, 1) in [(f.id, f.name, f.multiplier, f.count) for f in response.fans]
    assert response.fan == sum(fan.multiplier * fan.count for fan in response.fans)
    with pytest.raises(grpc.RpcError) as error:
        stub.EvaluateHand(
            scoring_service_pb2.EvaluateHandRequest(variant=common_pb2.VARIANT_FORMULA, concealed="1m")
        )
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "win_tile" in (error.value.details() or "")


def test_list_waits_gives_each_wait_with_its_multiplier(
    stub: scoring_service_pb2_grpc.ScoringServiceStub,
) -> None:
    response = stub.ListWaits(
        scoring_service_pb2.ListWaitsRequest(variant=SICHUAN, concealed="1112345678999m")
    )
    assert response.ready
    assert [wait.tile for wait in response.waits] == [f"{rank}m" for rank in range(1, 10)]
    assert all(wait.multiplier >= 4 for wait in response.waits)  # 清一色 at least


def test_list_waits_answers_a_formula_hand_with_each_waits_fans_rules_2_2(
    stub: scoring_service_pb2_grpc.ScoringServiceStub,
) -> None:
    """Formula waits (RULES.md 2.1, 2.2): tiles won on a discard, each with the EvaluateHand answer
    of that discard win (fan, meets_min, fans, wildcards_as)."""
    response = stub.ListWaits(
        scoring_service_pb2.ListWaitsRequest(
            variant=common_pb2.VARIANT_FORMULA,
            concealed="123456789m1p5s9s7z",
            melds=[],
            wildcard="7z",
            min_fan=8,
            flowers=2,
        )
    )
    assert not response.ready and not response.waits  # 1p 5s 9s + a wildcard: two tiles short
    response = stub.ListWaits(
        scoring_service_pb2.ListWaitsRequest(
            variant=common_pb2.VARIANT_FORMULA,
            concealed="123456789m12p5s7z",
            wildcard="7z",
            flowers=2,
            min_fan=8,
        )
    )
    assert response.ready
    for wait in response.waits:
        evaluated = stub.EvaluateHand(
            scoring_service_pb2.EvaluateHandRequest(
                variant=common_pb2.VARIANT_FORMULA,
                concealed="123456789m12p5s7z",
                win_tile=wait.tile,
                wildcard="7z",
                flowers=2,
                min_fan=8,
            )
        )
        assert evaluated.win
        assert (wait.fan, wait.meets_min, list(wait.fans), list(wait.wildcards_as)) == (
            evaluated.fan,
            evaluated.meets_min,
            list(evaluated.fans),
            list(evaluated.wildcards_as),
        )
    # 3p completes 12p (the wildcard pairs the 5s); 5s pairs the 5s (the wildcard is 3p).
    assert [wait.tile for wait in response.waits] == ["3p", "5s"]
    assert [list(wait.wildcards_as) for wait in response.waits] == [["5s"], ["3p"]]
    assert all(
        wait.meets_min and ("flower_tiles", 2) in [(f.id, f.count) for f in wait.fans]
        for wait in response.waits
    )


def test_list_waits_answers_formula_melds_winds_and_the_minimum_rules_2_1_2_2(
    stub: scoring_service_pb2_grpc.ScoringServiceStub,
) -> None:
    """Chow, pong and kong melds; the seat wind reaches the fans; min_fan decides meets_min, not
    ready (0 = no minimum, as in EvaluateHand)."""
    request = scoring_service_pb2.ListWaitsRequest(
        variant=common_pb2.VARIANT_FORMULA,
        concealed="2345m",
        melds=[
            common_pb2.Meld(kind="chow", tile="1p"),
            common_pb2.Meld(kind="pong", tile="9s"),
            common_pb2.Meld(kind="kong", tile="2z", exposure=common_pb2.KONG_EXPOSURE_CONCEALED),
        ],
        seat_wind="2z",
        min_fan=8,
    )
    response = stub.ListWaits(request)
    assert response.ready
    assert [wait.tile for wait in response.waits] == ["2m", "5m"]
    assert all("seat_wind" in [fan.id for fan in wait.fans] for wait in response.waits)
    assert not any(wait.meets_min for wait in response.waits)
    assert all(wait.multiplier == 0 for wait in response.waits)
    request.min_fan = 0
    assert all(wait.meets_min for wait in stub.ListWaits(request).waits)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"concealed": "1m"}, "13 concealed tiles"),
        ({"concealed": "123456789m12x"}, "bad suit letter"),
        ({"concealed": "123456789m1122p", "wildcard": "1f"}, "wildcard"),
        ({"concealed": "123456789m1122p", "seat_wind": "5z"}, "seat_wind"),
        ({"concealed": "123456789m1122p", "min_fan": -1}, "min_fan"),
        ({"concealed": "123456789m1122p", "flowers": 9}, "flowers"),
        ({"concealed": "1234567m1p", "melds": [common_pb2.Meld(kind="chow", tile="7z")]}, "chow"),
        ({"concealed": "1234567m1p", "melds": [common_pb2.Meld(kind="triple", tile="7z")]}, "meld kind"),
        (
            {
                "concealed": "2345m56s7z",
                "melds": [common_pb2.Meld(kind="pong", tile="7z")] * 2,
                "wildcard": "7z",
            },
            "7z",
        ),
        ({"concealed": "1111m234567m", "melds": [common_pb2.Meld(kind="pong", tile="1m")]}, "only 4"),
    ],
)
def test_list_waits_rejects_a_malformed_formula_hand(
    stub: scoring_service_pb2_grpc.ScoringServiceStub, fields: dict[str, object], message: str
) -> None:
    with pytest.raises(grpc.RpcError) as error:
        stub.ListWaits(scoring_service_pb2.ListWaitsRequest(variant=common_pb2.VARIANT_FORMULA, **fields))  # type: ignore[arg-type]
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (error.value.details() or "")


def test_get_game_settlement_returns_every_line_with_reason_and_fans_and_the_totals(
    stub: scoring_service_pb2_grpc.ScoringServiceStub, session_factory: SessionFactory
) -> None:
    script = TableScript(rules=room_rules(coefficient=10, rake_beans=5)).open(
        ["11234567888m99p5s", "123456789p2255s", "11335779s24699m", "123m1122456p789s"], "smpm"
    )
    script.discard(0, "5s")
    script.win(1, "5s", "discard", from_seat=0)
    script.draw(2, "1s")
    projection = SettlementProjection(EventStore())
    for envelope in script.events:
        with transaction(session_factory) as session:
            projection(session, envelope, MessagePosition("mahjong.table.v1", 0, 0))
    response = stub.GetGameSettlement(scoring_service_pb2.GetGameSettlementRequest(table_id="table-1"))
    assert not response.settled
    (line,) = response.lines
    assert (line.reason, line.payer_account, line.payees[0].account) == ("win", "player:p0", "player:p1")
    assert (line.payees[0].points, line.payees[0].beans, line.coefficient) == (1, 10, 10)
    assert [fan.name for fan in line.fans] == ["平胡"]
    assert [(total.account, total.beans) for total in response.totals] == [
        ("player:p0", -10),
        ("player:p1", 10),
        ("player:p2", 0),
        ("player:p3", 0),
    ]
    with pytest.raises(grpc.RpcError) as error:
        stub.GetGameSettlement(scoring_service_pb2.GetGameSettlementRequest(table_id="no-such-table"))
    assert error.value.code() == grpc.StatusCode.NOT_FOUND


def test_get_game_settlement_is_for_the_games_players_and_ops_or_finance_only(
    stub_for: StubFor, session_factory: SessionFactory
) -> None:
    script = TableScript(rules=room_rules(coefficient=10, rake_beans=5)).open(
        ["11234567888m99p5s", "123456789p2255s", "11335779s24699m", "123m1122456p789s"], "smpm"
    )
    projection = SettlementProjection(EventStore())
    for envelope in script.events:
        with transaction(session_factory) as session:
            projection(session, envelope, MessagePosition("mahjong.table.v1", 0, 0))
    request = scoring_service_pb2.GetGameSettlementRequest(table_id="table-1")
    with pytest.raises(grpc.RpcError) as error:
        stub_for("stranger").GetGameSettlement(request)
    assert error.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "did not play at table" in error.value.details()
    assert stub_for("p3").GetGameSettlement(request).table_id == "table-1"
    assert stub_for("auditor", ("finance",)).GetGameSettlement(request).table_id == "table-1"
    assert stub_for("operator", ("ops",)).GetGameSettlement(request).table_id == "table-1"


def _settle_two_games(session_factory: SessionFactory) -> None:
    """Two games (table-1, table-2) with a discard win, the checks and the rake."""
    projection = SettlementProjection(EventStore())
    for table_id in ("table-1", "table-2"):
        script = TableScript(table_id=table_id, rules=room_rules(coefficient=10, rake_beans=5)).open(
            ["11234567888m99p5s", "123456789p2255s", "11335779s24699m", "123m1122456p789s"], "smpm"
        )
        script.discard(0, "5s")
        script.win(1, "5s", "discard", from_seat=0)
        script.draw(2, "1s")
        script.wall_exhausted()
        script.ended("wall_exhausted")
        for envelope in script.events:
            with transaction(session_factory) as session:
                projection(session, envelope, MessagePosition("mahjong.table.v1", 0, 0))


def _all_pages(
    stub: scoring_service_pb2_grpc.ScoringServiceStub,
    request: scoring_service_pb2.ListSettlementInstructionsRequest,
) -> list[scoring_service_pb2.SettlementInstructionSummary]:
    found: list[scoring_service_pb2.SettlementInstructionSummary] = []
    while True:
        page = stub.ListSettlementInstructions(request)
        assert len(page.instructions) <= max(request.page_size, 1) or request.page_size == 0
        found.extend(page.instructions)
        if not page.next_page_token:
            return found
        request.page_token = page.next_page_token


def test_list_settlement_instructions_pages_through_every_line_of_a_game_or_a_window(
    stub_for: StubFor, session_factory: SessionFactory
) -> None:
    _settle_two_games(session_factory)
    with transaction(session_factory) as session:
        lines = {
            row.instruction_id: (row.table_id, row.total_beans)
            for row in session.execute(sqlalchemy.select(scoring_lines))
        }
    assert len(lines) >= 10  # a win, the checks and four rakes per game
    finance = stub_for("auditor", ("finance",))
    everything = _all_pages(finance, scoring_service_pb2.ListSettlementInstructionsRequest(page_size=3))
    assert [summary.instruction_id for summary in everything] == sorted(lines)
    assert {s.instruction_id: (s.table_id, s.requested_beans) for s in everything} == lines
    one_game = _all_pages(
        stub_for("operator", ("ops",)),
        scoring_service_pb2.ListSettlementInstructionsRequest(table_id="table-2", page_size=2),
    )
    assert {summary.table_id for summary in one_game} == {"table-2"}
    assert len(one_game) == sum(1 for table_id, _ in lines.values() if table_id == "table-2")
    # An instruction's time is the occurrence time of the table event that caused it (for the
    # discard win, the draw that closed the claim window): a one-second window holds its own only.
    times = sorted({summary.occurred_at.seconds for summary in everything})
    assert len(times) >= 2 and all(summary.HasField("occurred_at") for summary in everything)
    window = scoring_service_pb2.ListSettlementInstructionsRequest()
    getattr(window, "from").FromSeconds(times[0])
    window.to.FromSeconds(times[0] + 1)
    in_window = _all_pages(finance, window)
    expected = [summary for summary in everything if summary.occurred_at.seconds == times[0]]
    assert in_window == expected and len(expected) < len(everything)


def test_list_settlement_instructions_is_for_ops_and_finance_and_refuses_bad_requests(
    stub_for: StubFor, session_factory: SessionFactory
) -> None:
    _settle_two_games(session_factory)
    with pytest.raises(grpc.RpcError) as error:
        stub_for("p1").ListSettlementInstructions(scoring_service_pb2.ListSettlementInstructionsRequest())
    assert error.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finance = stub_for("auditor", ("finance",))
    first = finance.ListSettlementInstructions(
        scoring_service_pb2.ListSettlementInstructionsRequest(page_size=1)
    )
    assert first.next_page_token
    backwards = scoring_service_pb2.ListSettlementInstructionsRequest()
    getattr(backwards, "from").FromSeconds(2_000_000_000)
    backwards.to.FromSeconds(1_000_000_000)
    out_of_range = scoring_service_pb2.ListSettlementInstructionsRequest()
    getattr(out_of_range, "from").seconds = 2**40
    for request, message in [
        (scoring_service_pb2.ListSettlementInstructionsRequest(page_size=-1), "page_size"),
        (scoring_service_pb2.ListSettlementInstructionsRequest(page_size=5_001), "page_size"),
        (scoring_service_pb2.ListSettlementInstructionsRequest(table_id="x" * 201), "table_id"),
        (backwards, "is after to"),
        (out_of_range, "from must be a time"),
        (scoring_service_pb2.ListSettlementInstructionsRequest(page_token="not a token"), "malformed"),
        (
            scoring_service_pb2.ListSettlementInstructionsRequest(
                table_id="table-1", page_token=first.next_page_token
            ),
            "another query",
        ),
    ]:
        with pytest.raises(grpc.RpcError) as error:
            finance.ListSettlementInstructions(request)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, request
        assert message in (error.value.details() or ""), (message, error.value.details())


def test_settlement_reads_do_not_wait_for_the_projections_writer(
    stub_for: StubFor, session_factory: SessionFactory
) -> None:
    """GetGameSettlement and ListSettlementInstructions only read: they run while a write
    transaction (the consumer applying a batch) holds the writer lock, instead of queueing behind
    it (on SQLite a write transaction takes the process's writer lock and BEGIN IMMEDIATE)."""
    _settle_two_games(session_factory)
    finance = stub_for("auditor", ("finance",))
    writing, read = threading.Event(), threading.Event()

    def hold_a_write_transaction() -> None:
        with transaction(session_factory):
            writing.set()
            read.wait(timeout=60)  # a read that queued behind this would keep it here

    writer = threading.Thread(target=hold_a_write_transaction)
    writer.start()
    try:
        assert writing.wait(timeout=60)
        request = scoring_service_pb2.GetGameSettlementRequest(table_id="table-2")
        assert finance.GetGameSettlement(request, timeout=30).table_id == "table-2"
        listed = finance.ListSettlementInstructions(
            scoring_service_pb2.ListSettlementInstructionsRequest(table_id="table-2"), timeout=30
        )
        assert listed.instructions
        assert writer.is_alive()  # both answered while the write transaction was still open
    finally:
        read.set()
        writer.join(timeout=60)
