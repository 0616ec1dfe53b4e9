"""TableService over real gRPC: complete games played by bots through the public API, hidden
information never leaking into another seat's stream, idempotency, and bad input (issue 4)."""

from __future__ import annotations

import threading
from typing import Any

import grpc
import pytest
from mahjong.v1 import table_service_pb2 as messages
from mahjong_platform.database import transaction
from mjctl.bots import choose_command

from .conftest import TableServer

PLAYERS = ["east", "south", "west", "north"]


def play_to_the_end(server: TableServer, table_id: str) -> dict[str, list]:
    """Four bot threads act through GetView/Act; each also records its own Watch stream."""
    streams: dict[str, list] = {}

    def bot(player: str) -> None:
        stub = server.stub_for(player)
        while True:
            view = stub.GetView(messages.GetViewRequest(table_id=table_id))
            if view.phase == "ended":
                break
            request = choose_command(view)
            if request is None:
                threading.Event().wait(0.01)
                continue
            request.expected_sequence = view.sequence
            try:
                stub.Act(request)
            except grpc.RpcError as error:
                assert error.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ABORTED), error
        streams[player] = list(stub.Watch(messages.WatchRequest(table_id=table_id), timeout=30))

    threads = [threading.Thread(target=bot, args=(player,)) for player in PLAYERS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    assert all(not thread.is_alive() for thread in threads), "the game did not end"
    return streams


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_four_bots_play_a_complete_game_through_the_api(table_server: TableServer, seed: int) -> None:
    table_id = table_server.open_table(PLAYERS, seed=seed)
    streams = play_to_the_end(table_server, table_id)
    final = table_server.view("east", table_id)
    assert final.phase == "ended" and final.end_reason in ("three_wins", "wall_exhausted", "escapes")
    assert sum(seat.won for seat in final.seats) <= 3
    for player, events in streams.items():
        assert events[-1].WhichOneof("payload") == "game_ended", player
        sequences = [event.sequence for event in events]
        assert sequences == sorted(set(sequences))


def test_no_watch_stream_carries_another_players_concealed_tiles(table_server: TableServer) -> None:
    """RULES-level secrecy: the wall, others' deals, draws, exchange picks and missing suits stay
    hidden until revealed (a win shows the winner's hand; the end shows all)."""
    table_id = table_server.open_table(PLAYERS, seed=11)
    streams = play_to_the_end(table_server, table_id)
    for viewer_seat, player in enumerate(PLAYERS):
        for envelope in streams[player]:
            kind = envelope.WhichOneof("payload")
            payload = getattr(envelope, kind)
            if kind == "table_opened":
                assert not payload.wall and not payload.exchange_direction
            elif kind == "hands_dealt":
                for hand in payload.hands:
                    assert bool(hand.tiles) == (hand.seat == viewer_seat)
            elif kind == "tile_drawn" and payload.seat != viewer_seat:
                assert payload.tile == ""
            elif kind == "exchange_picked" and payload.seat != viewer_seat:
                assert not payload.tiles
            elif kind == "tiles_exchanged":
                assert all(viewer_seat in (t.from_seat, t.to_seat) for t in payload.transfers)
            elif kind == "missing_suit_chosen" and payload.seat != viewer_seat:
                assert payload.suit == ""
            elif kind == "claim_passed":
                assert payload.seat == viewer_seat


def test_ops_watch_with_full_information(table_server: TableServer) -> None:
    table_id = table_server.open_table(PLAYERS)
    opened = next(
        iter(table_server.stub_for("operator", ("ops",)).Watch(messages.WatchRequest(table_id=table_id)))
    )
    assert len(opened.table_opened.wall) == 108


def test_finance_may_not_watch_live_hands_only_ops_may(table_server: TableServer) -> None:
    table_id = table_server.open_table(PLAYERS)
    stream = table_server.stub_for("auditor", ("finance",)).Watch(messages.WatchRequest(table_id=table_id))
    with pytest.raises(grpc.RpcError) as raised:
        next(iter(stream))
    assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_watch_resumes_after_a_sequence(table_server: TableServer) -> None:
    table_id = table_server.open_table(PLAYERS)
    stub = table_server.stub_for("east")
    first = next(iter(stub.Watch(messages.WatchRequest(table_id=table_id))))
    resumed = next(iter(stub.Watch(messages.WatchRequest(table_id=table_id, after_sequence=first.sequence))))
    assert resumed.sequence == first.sequence + 1


def stored_event_count(server: TableServer, table_id: str) -> int:
    with transaction(server.session_factory) as session:  # type: ignore[arg-type]
        return server.engine.store.stream_version(session, table_id)


def test_a_replayed_idempotency_key_returns_the_first_answer_and_appends_nothing(
    table_server: TableServer,
) -> None:
    table_id = table_server.open_table(PLAYERS)
    view = table_server.view("east", table_id)
    request = choose_command(view)
    assert request is not None
    stub = table_server.stub_for("east")
    first = stub.Act(request)
    count = stored_event_count(table_server, table_id)
    again = stub.Act(request)
    assert again == first
    assert stored_event_count(table_server, table_id) == count


def test_a_reused_idempotency_key_with_another_request_is_refused_and_appends_nothing(
    table_server: TableServer,
) -> None:
    table_id = table_server.open_table(PLAYERS)
    view = table_server.view("east", table_id)
    request = choose_command(view)
    assert request is not None
    stub = table_server.stub_for("east")
    stub.Act(request)
    count = stored_event_count(table_server, table_id)
    other = messages.ActRequest(table_id=table_id, idempotency_key=request.idempotency_key)
    other.leave.SetInParent()
    with pytest.raises(grpc.RpcError) as raised:
        stub.Act(other)
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "different request" in raised.value.details()
    assert stored_event_count(table_server, table_id) == count


def test_a_reserved_idempotency_key_prefix_is_invalid(table_server: TableServer) -> None:
    table_id = table_server.open_table(PLAYERS)
    request = messages.ActRequest(table_id=table_id, idempotency_key="grant:east")
    request.leave.SetInParent()
    with pytest.raises(grpc.RpcError) as raised:
        table_server.stub_for("east").Act(request)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def exchange(tiles: str) -> messages.ActRequest:
    request = messages.ActRequest(idempotency_key="k")
    request.exchange_three.tiles = tiles
    return request


@pytest.mark.parametrize(
    ("player", "build", "code", "message"),
    [
        (
            "east",
            lambda t: messages.ActRequest(table_id="no-such-table", idempotency_key="k"),
            grpc.StatusCode.NOT_FOUND,
            "no table",
        ),
        (
            "mallory",
            lambda t: messages.ActRequest(table_id=t, idempotency_key="k"),
            grpc.StatusCode.PERMISSION_DENIED,
            "has no seat",
        ),
        (
            "east",
            lambda t: messages.ActRequest(table_id=t, idempotency_key="k"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "command is required",
        ),
        (
            "east",
            lambda t: _with_table(exchange("12x"), t),
            grpc.StatusCode.INVALID_ARGUMENT,
            "exchange_three",
        ),
        ("east", lambda t: _with_table(exchange("1m2p3s"), t), grpc.StatusCode.FAILED_PRECONDITION, ""),
        ("east", lambda t: _with_table(exchange("12m"), t), grpc.StatusCode.FAILED_PRECONDITION, ""),
        ("east", lambda t: _discard(t, "5m"), grpc.StatusCode.FAILED_PRECONDITION, ""),
        (
            "east",
            lambda t: _with_table(messages.ActRequest(), t, key=""),
            grpc.StatusCode.INVALID_ARGUMENT,
            "idempotency_key",
        ),
        (None, lambda t: _discard(t, "5m"), grpc.StatusCode.UNAUTHENTICATED, ""),
    ],
)
def test_bad_commands_get_a_clear_status_and_change_nothing(
    table_server: TableServer, player: str | None, build, code: grpc.StatusCode, message: str
) -> None:
    table_id = table_server.open_table(PLAYERS)
    before = stored_event_count(table_server, table_id)
    with pytest.raises(grpc.RpcError) as raised:
        table_server.stub_for(player).Act(build(table_id))
    assert raised.value.code() == code, raised.value.details()
    assert message in raised.value.details()
    assert raised.value.details()
    assert stored_event_count(table_server, table_id) == before


def _with_table(request: messages.ActRequest, table_id: str, key: str = "k") -> messages.ActRequest:
    request.table_id = table_id
    request.idempotency_key = key
    return request


def _discard(table_id: str, tile: str) -> messages.ActRequest:
    request = messages.ActRequest(table_id=table_id, idempotency_key="k")
    request.discard.tile = tile
    return request


def test_a_deadline_passes_and_the_server_acts_for_everyone(table_server: TableServer) -> None:
    """Turn timeouts (issue 4): with nobody acting, automatic actions carry the game to its end."""
    from mahjong_platform.envelopes import utc_now
    from mahjong_table.deadlines import DeadlineWorker
    from mahjong_table.servicer import Presence

    table_id = table_server.open_table(PLAYERS, turn_timeout_ms=0)
    worker = DeadlineWorker(table_server.session_factory, table_server.engine, Presence(), utc_now)  # type: ignore[arg-type]
    for _ in range(2000):
        if not worker.expire_deadlines():
            break
    final = table_server.view("east", table_id)
    assert final.phase == "ended"


def test_a_player_away_past_the_grace_escapes(table_server: TableServer) -> None:
    """RULES.md 1.10: disconnected past reconnect_grace_ms = escape."""
    from mahjong_platform.envelopes import utc_now
    from mahjong_table.deadlines import DeadlineWorker
    from mahjong_table.servicer import Presence

    table_id = table_server.open_table(PLAYERS, reconnect_grace_ms=0)
    worker = DeadlineWorker(table_server.session_factory, table_server.engine, Presence(), utc_now)  # type: ignore[arg-type]
    worker.escape_disconnected()
    worker.escape_disconnected()
    final = table_server.view("east", table_id)
    assert any(seat.left for seat in final.seats)


def play_on_watch_view(server: TableServer, table_id: str) -> dict[str, list[messages.TableUpdate]]:
    """Four bot threads play on their WatchView feeds (no GetView); each keeps its updates."""
    feeds: dict[str, list[messages.TableUpdate]] = {player: [] for player in PLAYERS}

    def bot(player: str) -> None:
        stub = server.stub_for(player)
        for update in stub.WatchView(messages.WatchViewRequest(table_id=table_id), timeout=600):
            feeds[player].append(update)
            request = choose_command(update.view)
            if request is None:
                continue
            request.expected_sequence = update.view.sequence
            try:
                stub.Act(request)
            except grpc.RpcError as error:
                assert error.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ABORTED), error

    threads = [threading.Thread(target=bot, args=(player,)) for player in PLAYERS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    assert all(not thread.is_alive() for thread in threads), "the game did not end"
    return feeds


def test_a_game_played_on_watch_view_feeds_every_event_once_with_a_matching_view(
    table_server: TableServer,
) -> None:
    table_id = table_server.open_table(PLAYERS, seed=5)
    feeds = play_on_watch_view(table_server, table_id)
    watched = {
        player: [
            event.sequence
            for event in table_server.stub_for(player).Watch(
                messages.WatchRequest(table_id=table_id), timeout=30
            )
        ]
        for player in PLAYERS
    }
    for seat, player in enumerate(PLAYERS):
        updates = feeds[player]
        assert updates[-1].view.phase == "ended"
        # Every event the seat may see arrives once, in order, exactly as Watch redacts it.
        assert [event.sequence for update in updates for event in update.events] == watched[player]
        previous_view = 0
        for update in updates:
            assert update.view.your_seat == seat
            # An update's events are exactly those after the previous view, up to its own view:
            # never a view ahead of events still to come.
            assert all(previous_view < event.sequence <= update.view.sequence for event in update.events)
            previous_view = update.view.sequence
            for event in update.events:
                if event.WhichOneof("payload") == "tile_drawn" and event.tile_drawn.seat != seat:
                    assert event.tile_drawn.tile == ""  # no other seat's draw


def test_watch_view_starts_with_the_view_now_and_resumes_after_a_sequence(table_server: TableServer) -> None:
    table_id = table_server.open_table(PLAYERS)
    stub = table_server.stub_for("east")
    first = next(iter(stub.WatchView(messages.WatchViewRequest(table_id=table_id), timeout=60)))
    assert first.view == table_server.view("east", table_id)
    assert [event.sequence for event in first.events] == list(range(1, first.view.sequence + 1))
    resumed = next(
        iter(
            stub.WatchView(
                messages.WatchViewRequest(table_id=table_id, after_sequence=first.view.sequence), timeout=10
            )
        )
    )
    assert not resumed.events and resumed.view.sequence == first.view.sequence


def test_watch_view_is_for_seated_players(table_server: TableServer) -> None:
    table_id = table_server.open_table(PLAYERS)
    for stub in (table_server.stub_for("stranger"), table_server.stub_for("operator", ("ops",))):
        with pytest.raises(grpc.RpcError) as refused:
            next(iter(stub.WatchView(messages.WatchViewRequest(table_id=table_id), timeout=60)))
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as invalid:
        next(
            iter(
                table_server.stub_for("east").WatchView(
                    messages.WatchViewRequest(table_id=table_id, after_sequence=-1), timeout=10
                )
            )
        )
    assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_the_four_feeds_of_a_change_read_its_events_once(table_server: TableServer) -> None:
    """The seats' feeds wake together after a commit and want the same events: one read serves
    them all (`TableServicer._events_up_to`), and each still gets its own redacted update."""
    table_id = table_server.open_table(PLAYERS)
    watch = messages.WatchViewRequest(table_id=table_id)
    feeds = {player: iter(table_server.stub_for(player).WatchView(watch, timeout=60)) for player in PLAYERS}
    opened = {player: next(feed) for player, feed in feeds.items()}
    engine = table_server.engine
    reads: list[tuple[str, int]] = []
    read_recent = engine.recent_events_after

    def counted(table: str, after: int, limit: int, *, at_least_up_to: int = 0) -> list[Any] | None:
        reads.append((table, after))
        return read_recent(table, after, limit, at_least_up_to=at_least_up_to)

    engine.recent_events_after = counted  # type: ignore[method-assign]
    request = choose_command(opened["east"].view)
    assert request is not None
    request.table_id = table_id
    table_server.stub_for("east").Act(request, timeout=30)
    updates = {player: next(feed) for player, feed in feeds.items()}
    assert reads == [(table_id, opened["east"].view.sequence)]
    for seat, player in enumerate(PLAYERS):
        assert updates[player].events and updates[player].view.your_seat == seat
        assert updates[player].view == table_server.view(player, table_id)
