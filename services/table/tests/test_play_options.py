"""The opt-in options of a Play stream (`PlayOptions`), on the real server.

`answers_with_updates`: a command's answer rides on the update after it (one message instead of
two), each answer exactly what it is without the option, before the update it rides on; a refused
command is answered alone at once; an answer waits for an update only as long as
`PLAY_ANSWER_RIDE_SECONDS`, so a claim window that does not ask the seat (which holds its updates
back) shows in nothing but the pause that shows it without the option; claim windows reveal
nothing through these streams either (`test_claim_window_privacy`'s checks).

`wait_for_table_ms`: a stream opened before its table waits for it to open instead of NOT_FOUND;
a caller not seated there is PERMISSION_DENIED once it opens, as without the wait; a table that
does not open within the wait is NOT_FOUND; a wait (or a `hold_idle_updates_ms`,
`test_play_hold`) out of range is INVALID_ARGUMENT.
"""

from __future__ import annotations

import datetime
import threading
import time
import uuid
from collections.abc import Callable

import grpc
import pytest
import sqlalchemy
from mahjong.v1 import table_service_pb2 as messages
from mahjong_platform.database import transaction
from mahjong_platform.envelopes import new_envelope, utc_now
from mahjong_platform.event_store import EventStore
from mahjong_platform.tracked_consumer import BatchApplier, Delivery, MessagePosition, per_event
from mahjong_table import servicer as servicer_module
from mahjong_table.codec import event_of
from mahjong_table.core.commands import Discard, Pass, TableCommand
from mahjong_table.models import table_status
from mahjong_table.projection import table_opening_handler
from mahjong_table.selfplay import greedy_command
from mahjong_table.testing import table_assigned
from mahjong_table.variants import fold
from mjctl.bots import choose_command
from mjctl.client import answers_of

from .conftest import TableServer
from .test_claim_window_privacy import check_non_claimants_see_the_same, full_events
from .test_play_stream import REFUSALS, PlayClient, play_on_play_streams, privacy_records_on_play
from .test_table_service import PLAYERS, exchange

RIDING = messages.PlayOptions(answers_with_updates=True)


def _scope(server: TableServer) -> Callable[[], object]:
    return lambda: transaction(server.session_factory)  # type: ignore[arg-type]


def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait for `condition` (a state the server reaches, not a time): at most 60 s."""
    give_up = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < give_up, what
        threading.Event().wait(0.005)


def _answers_and_updates(
    responses: list[messages.PlayResponse],
) -> list[tuple[str, messages.PlayAnswer | messages.TableUpdate]]:
    """What a stream received in the order a client reads it: a response's answers before its update."""
    read: list[tuple[str, messages.PlayAnswer | messages.TableUpdate]] = []
    for response in responses:
        read.extend(("answer", answer) for answer in answers_of(response))
        if response.WhichOneof("response") == "update":
            read.append(("update", response.update))
    return read


@pytest.mark.parametrize("seed", [4, 5])
def test_answers_ride_on_updates_and_every_event_and_answer_still_arrives_once(
    table_server: TableServer, seed: int
) -> None:
    table_id = table_server.open_table(PLAYERS, seed=seed)
    received = play_on_play_streams(table_server, table_id, RIDING)
    riding = 0
    for seat, player in enumerate(PLAYERS):
        stub = table_server.stub_for(player)
        watched = list(stub.Watch(messages.WatchRequest(table_id=table_id), timeout=30))
        read = _answers_and_updates(received[player])
        updates = [item for kind, item in read if kind == "update"]
        assert isinstance(updates[-1], messages.TableUpdate) and updates[-1].view.phase == "ended"
        assert updates[-1].view == table_server.view(player, table_id)
        assert [event for update in updates for event in update.events] == watched  # type: ignore[union-attr]
        assert all(update.view.your_seat == seat for update in updates)  # type: ignore[union-attr]
        riding += sum(len(response.answers) for response in received[player])
        accepted = 0
        for position, (kind, answer) in enumerate(read):
            if kind != "answer":
                continue
            assert isinstance(answer, messages.PlayAnswer)
            assert answer.code == 0 or answer.code in REFUSALS, answer
            if answer.code or not answer.result.events:
                continue
            accepted += 1
            # Before every update showing the command's events, as without the option.
            first_event = answer.result.events[0].sequence
            earlier = [item for kind, item in read[:position] if kind == "update"]
            assert all(event.sequence < first_event for update in earlier for event in update.events)  # type: ignore[union-attr]
            assert list(answer.result.events) == watched[first_event - 1 : answer.result.sequence]
        assert accepted > 0, player
    assert riding > 0, "no answer rode on an update"


def test_without_the_option_no_answer_rides(table_server: TableServer) -> None:
    table_id = table_server.open_table(PLAYERS, seed=4)
    received = play_on_play_streams(table_server, table_id)
    assert all(not response.answers for responses in received.values() for response in responses)


def test_a_riding_answer_is_the_answer_act_gives_for_its_key(table_server: TableServer) -> None:
    table_id = table_server.open_table(PLAYERS)
    stub = table_server.stub_for("east")
    client = PlayClient(stub, table_id, options=RIDING)
    first = next(client.responses).update
    request = exchange(choose_command(first.view).exchange_three.tiles)  # type: ignore[union-attr]
    request.idempotency_key = str(uuid.uuid4())
    client.send(request)
    response = next(client.responses)
    # The answer rides on the update showing the command, before it.
    assert response.WhichOneof("response") == "update"
    assert [answer.idempotency_key for answer in response.answers] == [request.idempotency_key]
    answer = response.answers[0]
    assert answer.code == 0 and [e.WhichOneof("payload") for e in answer.result.events] == ["exchange_picked"]
    assert [event.sequence for event in response.update.events] == [first.view.sequence + 1]
    # The same key again: the first answer, alone (no update follows a retry), nothing appended.
    client.send(request)
    again = next(client.responses)
    assert again.WhichOneof("response") == "answer" and again.answer == answer
    with_table = messages.ActRequest()
    with_table.CopyFrom(request)
    with_table.table_id = table_id
    assert stub.Act(with_table) == answer.result
    assert table_server.view("east", table_id).sequence == response.update.view.sequence
    client.close()


def test_a_refused_command_is_answered_alone_at_once(table_server: TableServer) -> None:
    table_id = table_server.open_table(PLAYERS)
    client = PlayClient(table_server.stub_for("east"), table_id, options=RIDING)
    next(client.responses)
    refused = messages.ActRequest(idempotency_key="k1")
    refused.discard.tile = "1m"  # the exchange phase: no discard now
    client.send(refused)
    response = next(client.responses)
    assert response.WhichOneof("response") == "answer" and not response.answers
    assert (response.answer.idempotency_key, response.answer.code) == (
        "k1",
        grpc.StatusCode.FAILED_PRECONDITION.value[0],
    )
    client.close()


def _table_before_discard(server: TableServer, opens_window: bool) -> tuple[str, int, str]:
    """A seeded table played greedily up to a turn whose greedy discard opens a claim window
    (`opens_window`) or does not; the discarding seat and its tile. Found on a probe table, then
    replayed on a fresh one with the same seed (the play is deterministic)."""
    engine, scope = server.engine, _scope(server)
    for seed in range(1, 200):
        probe = server.open_table(PLAYERS, seed=seed)
        state = engine.read_state(scope, probe)  # type: ignore[arg-type]
        steps = 0
        while not state.is_over:
            command: TableCommand = greedy_command(state)
            state, _envelopes, _answer = engine.act(scope, probe, lambda _state, c=command: c)  # type: ignore[arg-type,misc]
            steps += 1
            if isinstance(command, Discard) and (state.window is not None) == opens_window:
                table_id = server.open_table(PLAYERS, seed=seed)
                for _ in range(steps - 1):
                    engine.act(scope, table_id, greedy_command)  # type: ignore[arg-type]
                return table_id, command.seat, command.tile
    raise AssertionError("no seed gave such a discard")


def _discard(table_id: str, tile: str) -> messages.ActRequest:
    request = messages.ActRequest(table_id=table_id, idempotency_key=str(uuid.uuid4()))
    request.discard.tile = tile
    return request


def test_a_discard_nobody_can_claim_is_answered_riding_on_the_next_draw(table_server: TableServer) -> None:
    table_id, seat, tile = _table_before_discard(table_server, opens_window=False)
    client = PlayClient(table_server.stub_for(PLAYERS[seat]), table_id, options=RIDING)
    before = next(client.responses).update.view
    assert before.phase == "turn" and before.turn_seat == seat
    request = _discard(table_id, tile)
    client.send(request)
    response = next(client.responses)
    assert response.WhichOneof("response") == "update"
    assert [answer.idempotency_key for answer in response.answers] == [request.idempotency_key]
    kinds = [event.WhichOneof("payload") for event in response.update.events]
    assert kinds[0] == "tile_discarded" and "tile_drawn" in kinds
    client.close()


def test_a_discard_a_hidden_window_follows_is_answered_riding_on_the_update_after_the_window(
    table_server: TableServer,
) -> None:
    """The discard opens a window that does not ask the discarder: its answer is not sent alone
    while the window is open, however long past the ride wait, but rides on the update after the
    window, as it rides on the next draw when nobody can claim (the test above): the discarder
    receives the same shape of messages whether or not another hand can claim (RULES.md 1.4:
    concealed tiles; `visibility`). A lone answer meanwhile would have told it that someone can."""
    table_id, seat, tile = _table_before_discard(table_server, opens_window=True)
    client = PlayClient(table_server.stub_for(PLAYERS[seat]), table_id, options=RIDING)
    next(client.responses)
    request = _discard(table_id, tile)
    client.send(request)
    engine, scope = table_server.engine, _scope(table_server)
    _until(lambda: engine.read_state(scope, table_id).window is not None, "the discard opened no window")  # type: ignore[arg-type]
    time.sleep(40 * servicer_module.PLAY_ANSWER_RIDE_SECONDS)  # the old code sent the answer alone by now
    state = engine.read_state(scope, table_id)  # type: ignore[arg-type]
    while state.window is not None and state.window.pending:
        pending = min(state.window.pending)
        state, _envelopes, _answer = engine.act(scope, table_id, lambda _state, s=pending: Pass(s))  # type: ignore[arg-type,misc]
    response = next(client.responses)
    assert response.WhichOneof("response") == "update", "the answer went alone while the window was open"
    assert [answer.idempotency_key for answer in response.answers] == [request.idempotency_key]
    assert response.answers[0].code == 0
    assert response.update.events[0].WhichOneof("payload") == "tile_discarded"
    client.close()


@pytest.mark.parametrize("seed", [1, 2])
def test_sichuan_seats_not_asked_in_a_window_see_nothing_of_it_with_riding_answers_rules_1_4(
    table_server: TableServer, seed: int
) -> None:
    table_id = table_server.open_table(PLAYERS, seed=seed)
    records = privacy_records_on_play(table_server, table_id, RIDING)
    assert check_non_claimants_see_the_same(records, full_events(table_server, table_id)) > 0


def _opening_waits(server: TableServer) -> int:
    assert server.servicer is not None
    return server.servicer._opening_waits


def _first_response(
    server: TableServer, player: str, table_id: str, options: messages.PlayOptions, out: list[object]
) -> threading.Thread:
    def read() -> None:
        client = PlayClient(server.stub_for(player), table_id, options=options)
        try:
            out.append(next(client.responses))
        except grpc.RpcError as error:
            out.append(error)
        client.close()

    thread = threading.Thread(target=read)
    thread.start()
    return thread


def test_a_play_stream_opened_before_its_table_waits_for_it_to_open(table_server: TableServer) -> None:
    table_id = str(uuid.uuid4())
    out: list[object] = []
    thread = _first_response(
        table_server, "east", table_id, messages.PlayOptions(wait_for_table_ms=30_000), out
    )
    _until(lambda: _opening_waits(table_server) == 1, "the stream did not wait")
    assert not out
    table_server.open_table(PLAYERS, table_id=table_id)
    thread.join(60)
    assert isinstance(out[0], messages.PlayResponse), out
    assert out[0].update.view == table_server.view("east", table_id)
    assert _opening_waits(table_server) == 0


def test_a_caller_not_seated_at_the_table_it_waits_for_is_refused_once_it_opens(
    table_server: TableServer,
) -> None:
    table_id = str(uuid.uuid4())
    out: list[object] = []
    thread = _first_response(
        table_server, "stranger", table_id, messages.PlayOptions(wait_for_table_ms=30_000), out
    )
    _until(lambda: _opening_waits(table_server) == 1, "the stream did not wait")
    table_server.open_table(PLAYERS, table_id=table_id)
    thread.join(60)
    assert isinstance(out[0], grpc.RpcError) and out[0].code() == grpc.StatusCode.PERMISSION_DENIED
    # The same answer and message as a caller who asks after the table opened, without waiting.
    with pytest.raises(grpc.RpcError) as asked_after:
        next(PlayClient(table_server.stub_for("stranger"), table_id).responses)
    assert (asked_after.value.code(), asked_after.value.details()) == (out[0].code(), out[0].details())


def test_a_table_that_does_not_open_within_the_wait_is_not_found(table_server: TableServer) -> None:
    table_id = str(uuid.uuid4())
    for options in (messages.PlayOptions(), messages.PlayOptions(wait_for_table_ms=50)):
        with pytest.raises(grpc.RpcError) as missing:
            next(PlayClient(table_server.stub_for("east"), table_id, options=options).responses)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    assert _opening_waits(table_server) == 0


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("wait_for_table_ms", -1),
        ("wait_for_table_ms", 30_001),
        ("hold_idle_updates_ms", -1),
        ("hold_idle_updates_ms", 1001),
    ],
)
def test_an_option_out_of_range_is_invalid(table_server: TableServer, option: str, value: int) -> None:
    table_id = table_server.open_table(PLAYERS)
    options = messages.PlayOptions(**{option: value})
    with pytest.raises(grpc.RpcError) as invalid:
        next(PlayClient(table_server.stub_for("east"), table_id, options=options).responses)
    assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert option in (invalid.value.details() or "")


def _open_through_the_consumer(
    table_server: TableServer, table_id: str, before_commit: Callable[[], object] = lambda: None
) -> None:
    """Open `table_id` as the table-openings consumer does: its handler applies matchmaking's
    `TableAssigned` in the consumer's transaction; `before_commit()` runs just before the commit."""
    assigned = new_envelope(table_assigned(table_id, PLAYERS), stream_id=table_id, clock=utc_now)
    applier = BatchApplier(
        table_server.session_factory,  # type: ignore[arg-type]
        "table-openings",
        per_event(table_opening_handler(table_server.engine)),
        lambda _delivery, error: pytest.fail(error),
        before_commit=lambda _position: before_commit(),
    )
    delivery = Delivery(assigned, MessagePosition("match", 0, 0))
    assert applier.apply([delivery], [delivery.position]).applied == 1


def test_a_table_the_match_consumer_opens_wakes_the_stream_waiting_for_it_once_committed(
    table_server: TableServer,
) -> None:
    """The consumer's transaction opens the table; its watchers here are told after the commit
    (never before: a stream woken then would find no table), so a waiting stream starts at once."""
    table_id = str(uuid.uuid4())
    out: list[object] = []
    thread = _first_response(
        table_server, "east", table_id, messages.PlayOptions(wait_for_table_ms=30_000), out
    )
    _until(lambda: _opening_waits(table_server) == 1, "the stream did not wait")
    engine = table_server.engine
    _open_through_the_consumer(
        table_server, table_id, before_commit=lambda: out.append(engine.changes.version(table_id))
    )
    assert out[0] == 0, "told before the commit"
    assert engine.changes.version(table_id) > 0, "not told after the commit"
    thread.join(60)
    assert isinstance(out[1], messages.PlayResponse), out
    assert out[1].update.view == table_server.view("east", table_id)


def test_a_table_the_match_consumer_opens_is_in_memory_once_committed(table_server: TableServer) -> None:
    """The opening is published as a command's events are: its state, its deadline and its
    events are in memory after the commit, equal to what the store holds, so the four streams
    that waited for the table read none of them from the store."""
    table_id = str(uuid.uuid4())
    engine = table_server.engine
    _open_through_the_consumer(table_server, table_id)
    state = engine.cached_state(table_id)
    assert state is not None, "the opening's state is not in memory"
    known, deadline = engine.known_deadline(state)
    assert known and deadline is not None
    recent = engine.recent_events_after(table_id, 0, 10)
    assert recent is not None and [envelope.sequence for envelope in recent] == [1, 2]
    with transaction(table_server.session_factory) as session:  # type: ignore[arg-type]
        stored = EventStore().load(session, table_id)
        stored_deadline = session.execute(
            sqlalchemy.select(table_status.c.deadline_at).where(table_status.c.table_id == table_id)
        ).scalar_one()
    assert [envelope.SerializeToString() for envelope in recent] == [e.SerializeToString() for e in stored]
    assert state == fold((event_of(envelope) for envelope in stored), None)
    assert deadline == stored_deadline.replace(tzinfo=datetime.UTC)  # SQLite gives back naive UTC
