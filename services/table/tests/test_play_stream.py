"""The Play stream on the real server: a seat's updates and its commands' answers on one stream.

Every event once, in order, as WatchView and Watch give it; an answer per command, matched by its
idempotency key and shared with Act (the same key answers the same, whichever way it came); each
answer before any update after it; resumable from a sequence; for seated players only; a bad
command is a clear answer and the stream goes on; and claim windows reveal nothing through it to
the seats they do not ask (the checks of `test_claim_window_privacy`, on Play streams)."""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Iterator

import grpc
import pytest
from mahjong.v1 import table_service_pb2 as messages
from mahjong.v1 import table_service_pb2_grpc
from mjctl.bots import choose_command
from mjctl.client import answers_of

from .conftest import TableServer
from .test_claim_window_deadline import window_asking_several
from .test_claim_window_privacy import SeatRecord, check_non_claimants_see_the_same, choose, full_events
from .test_formula_table_service import open_formula_table
from .test_table_service import PLAYERS, exchange

REFUSALS = (grpc.StatusCode.FAILED_PRECONDITION.value[0], grpc.StatusCode.ABORTED.value[0])


class PlayClient:
    """One Play stream over the sync client: commands go in through a queue."""

    def __init__(
        self,
        stub: table_service_pb2_grpc.TableServiceStub,
        table_id: str,
        after: int = 0,
        options: messages.PlayOptions | None = None,
    ) -> None:
        self._requests: queue.Queue[messages.PlayRequest | None] = queue.Queue()
        self._requests.put(
            messages.PlayRequest(
                open=messages.WatchViewRequest(table_id=table_id, after_sequence=after), options=options
            )
        )
        self.responses: Iterator[messages.PlayResponse] = stub.Play(
            iter(self._requests.get, None), timeout=600
        )

    def send(self, request: messages.ActRequest) -> None:
        self._requests.put(messages.PlayRequest(act=request))

    def close(self) -> None:
        self._requests.put(None)
        self.responses.cancel()  # type: ignore[attr-defined]


def next_of(client: PlayClient, kind: str) -> messages.PlayResponse:
    for response in client.responses:
        if response.WhichOneof("response") == kind:
            return response
    raise AssertionError(f"the stream ended before a {kind}")


def play_on_play_streams(
    server: TableServer, table_id: str, options: messages.PlayOptions | None = None
) -> dict[str, list[messages.PlayResponse]]:
    """Four bots play on their Play streams only (no other call; opened with `options`); each
    keeps what it received and the keys it sent."""
    received: dict[str, list[messages.PlayResponse]] = {player: [] for player in PLAYERS}
    sent: dict[str, list[str]] = {player: [] for player in PLAYERS}

    def bot(player: str) -> None:
        client = PlayClient(server.stub_for(player), table_id, options=options)
        for response in client.responses:
            received[player].append(response)
            if response.WhichOneof("response") != "update":
                continue
            view = response.update.view
            if view.phase == "ended":
                break
            request = choose_command(view)
            if request is not None:
                request.expected_sequence = view.sequence
                sent[player].append(request.idempotency_key)
                client.send(request)
        client.close()

    threads = [threading.Thread(target=bot, args=(player,)) for player in PLAYERS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    assert all(not thread.is_alive() for thread in threads), "the game did not end"
    for player in PLAYERS:
        answered = [answer.idempotency_key for r in received[player] for answer in answers_of(r)]
        assert sorted(answered) == sorted(sent[player]), f"{player}: one answer per command"
    return received


@pytest.mark.parametrize("seed", [4, 5])
def test_a_game_played_on_play_streams_feeds_every_event_once_and_answers_every_command(
    table_server: TableServer, seed: int
) -> None:
    table_id = table_server.open_table(PLAYERS, seed=seed)
    received = play_on_play_streams(table_server, table_id)
    for seat, player in enumerate(PLAYERS):
        watched = [
            event
            for event in table_server.stub_for(player).Watch(
                messages.WatchRequest(table_id=table_id), timeout=30
            )
        ]
        updates = [r.update for r in received[player] if r.WhichOneof("response") == "update"]
        assert updates[-1].view.phase == "ended"
        assert updates[-1].view == table_server.view(player, table_id)
        # Every event the seat may see arrives once, in order, exactly as Watch redacts it.
        assert [event for update in updates for event in update.events] == watched
        previous_view = 0
        for update in updates:
            assert update.view.your_seat == seat
            assert all(previous_view < event.sequence <= update.view.sequence for event in update.events)
            previous_view = update.view.sequence
        accepted = 0
        for position, response in enumerate(received[player]):
            if response.WhichOneof("response") != "answer":
                continue
            answer = response.answer
            assert answer.code == 0 or answer.code in REFUSALS, answer
            if answer.code or not answer.result.events:
                continue
            accepted += 1
            # The answer comes before every update after its command: no update before it shows
            # the command's events.
            first_event = answer.result.events[0].sequence
            earlier = [r.update for r in received[player][:position] if r.WhichOneof("response") == "update"]
            assert all(event.sequence < first_event for update in earlier for event in update.events)
            assert list(answer.result.events) == watched[first_event - 1 : answer.result.sequence]
        assert accepted > 0, player


def test_play_resumes_after_a_sequence_and_a_resent_command_gets_its_first_answer(
    table_server: TableServer,
) -> None:
    table_id = table_server.open_table(PLAYERS)
    stub = table_server.stub_for("east")
    client = PlayClient(stub, table_id)
    first = next_of(client, "update").update
    assert first.view == table_server.view("east", table_id)
    assert [event.sequence for event in first.events] == list(range(1, first.view.sequence + 1))
    request = exchange(choose_command(first.view).exchange_three.tiles)  # type: ignore[union-attr]
    request.idempotency_key = str(uuid.uuid4())
    client.send(request)  # table_id empty: the stream's table
    answer = next_of(client, "answer").answer
    assert answer.code == 0 and answer.idempotency_key == request.idempotency_key
    assert [event.WhichOneof("payload") for event in answer.result.events] == ["exchange_picked"]
    after = next_of(client, "update").update
    assert [event.sequence for event in after.events] == [first.view.sequence + 1]
    client.close()

    resumed = PlayClient(stub, table_id, after=after.view.sequence)
    again = next_of(resumed, "update").update
    assert not again.events and again.view == after.view
    resumed.send(request)  # the same command, the same key: the first answer, nothing appended
    assert next_of(resumed, "answer").answer == answer
    with_table = messages.ActRequest()
    with_table.CopyFrom(request)
    with_table.table_id = table_id
    assert stub.Act(with_table) == answer.result  # one store of first answers for Act and Play
    assert table_server.view("east", table_id).sequence == after.view.sequence
    resumed.close()


def test_play_answers_a_bad_command_and_goes_on(table_server: TableServer) -> None:
    table_id = table_server.open_table(PLAYERS)
    client = PlayClient(table_server.stub_for("east"), table_id)
    view = next_of(client, "update").update.view
    tiles = choose_command(view).exchange_three.tiles  # type: ignore[union-attr]
    other_table = exchange(tiles)
    other_table.table_id, other_table.idempotency_key = str(uuid.uuid4()), "k1"
    client.send(other_table)
    refused = next_of(client, "answer").answer
    assert (refused.idempotency_key, refused.code) == ("k1", grpc.StatusCode.INVALID_ARGUMENT.value[0])
    assert "this Play stream plays table" in refused.message
    no_key = exchange(tiles)
    no_key.idempotency_key = ""
    client.send(no_key)
    assert next_of(client, "answer").answer.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    good = exchange(tiles)
    good.idempotency_key = "k2"
    client.send(good)
    assert next_of(client, "answer").answer.code == 0
    reused = messages.ActRequest(idempotency_key="k2")
    reused.leave.SetInParent()
    client.send(reused)
    answer = next_of(client, "answer").answer
    assert answer.code == grpc.StatusCode.FAILED_PRECONDITION.value[0], answer
    assert not any(seat.left for seat in table_server.view("east", table_id).seats)
    client.close()


def test_play_is_for_seated_players_and_starts_with_open(table_server: TableServer) -> None:
    table_id = table_server.open_table(PLAYERS)
    for stub in (table_server.stub_for("stranger"), table_server.stub_for("operator", ("ops",))):
        with pytest.raises(grpc.RpcError) as refused:
            next(PlayClient(stub, table_id).responses)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    stub = table_server.stub_for("east")
    with pytest.raises(grpc.RpcError) as invalid:
        next(iter(stub.Play(iter([messages.PlayRequest(act=exchange("123m"))]), timeout=10)))
    assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as negative:
        next(PlayClient(stub, table_id, after=-1).responses)
    assert negative.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as unauthenticated:
        next(PlayClient(table_server.stub_for(None), table_id).responses)
    assert unauthenticated.value.code() == grpc.StatusCode.UNAUTHENTICATED


def privacy_records_on_play(
    server: TableServer, table_id: str, options: messages.PlayOptions | None = None
) -> dict[int, SeatRecord]:
    """`test_claim_window_privacy.play`, with every seat on one Play stream (opened with
    `options`): its updates are the feed, its commands (and the probe after each discard) go in on
    it and wait for their answers."""
    records = {seat: SeatRecord() for seat in range(4)}
    clients = {
        seat: PlayClient(server.stub_for(PLAYERS[seat]), table_id, options=options) for seat in range(4)
    }
    answers: dict[int, dict[str, messages.PlayAnswer]] = {seat: {} for seat in range(4)}
    arrived = {seat: threading.Condition() for seat in range(4)}
    ended = threading.Event()
    closed: set[int] = set()

    def read(seat: int) -> None:
        for response in clients[seat].responses:
            with arrived[seat]:
                for answer in answers_of(response):  # riding on an update: they come before it
                    answers[seat][answer.idempotency_key] = answer
                arrived[seat].notify_all()
            if response.WhichOneof("response") == "update":
                records[seat].updates.append(response.update)
                if response.update.view.phase == "ended":
                    ended.set()
        with arrived[seat]:
            closed.add(seat)  # the game is over: the server ended the stream after its last answers
            arrived[seat].notify_all()

    def ask(seat: int, request: messages.ActRequest) -> messages.PlayAnswer:
        clients[seat].send(request)
        with arrived[seat]:
            assert arrived[seat].wait_for(
                lambda: request.idempotency_key in answers[seat] or seat in closed, 120
            )
            if request.idempotency_key in answers[seat]:
                return answers[seat].pop(request.idempotency_key)
        # Sent after the stream ended with the game: Act answers it (the same path, the same rules).
        try:
            return messages.PlayAnswer(result=server.stub_for(PLAYERS[seat]).Act(request))
        except grpc.RpcError as error:
            return messages.PlayAnswer(code=error.code().value[0], message=error.details())

    turn_gate = threading.Lock()

    def act(seat: int) -> None:
        stub = server.stub_for(PLAYERS[seat])
        while not ended.is_set():
            view = stub.GetView(messages.GetViewRequest(table_id=table_id))
            if view.phase == "ended":
                return
            request = choose(view)
            if request is None:
                threading.Event().wait(0.01)
                continue
            request.expected_sequence = view.sequence
            if view.phase == "claim":
                send(seat, request)
            else:
                with turn_gate:
                    send(seat, request)

    def send(seat: int, request: messages.ActRequest) -> None:
        answer = ask(seat, request)
        if answer.code:
            assert answer.code in REFUSALS, answer
            return
        if request.WhichOneof("command") == "discard":
            records[seat].discard_answers.append(answer.result)
            probe = messages.ActRequest(table_id=table_id, idempotency_key=str(uuid.uuid4()))
            probe.discard.tile = request.discard.tile
            refused = ask(seat, probe)
            assert refused.code, refused
            records[seat].probes[answer.result.sequence] = refused.message

    threads = [threading.Thread(target=target, args=(seat,)) for seat in range(4) for target in (read, act)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    assert all(not thread.is_alive() for thread in threads), "the game did not end"
    for client in clients.values():
        client.close()
    return records


@pytest.mark.parametrize("seed", [1, 2])
def test_sichuan_seats_not_asked_in_a_window_see_nothing_of_it_on_play_rules_1_4(
    table_server: TableServer, seed: int
) -> None:
    table_id = table_server.open_table(PLAYERS, seed=seed)
    records = privacy_records_on_play(table_server, table_id)
    assert check_non_claimants_see_the_same(records, full_events(table_server, table_id)) > 0


def test_formula_seats_not_asked_in_a_window_see_nothing_of_it_on_play_rules_2_1(
    table_server: TableServer,
) -> None:
    table_id = open_formula_table(table_server, 1)
    records = privacy_records_on_play(table_server, table_id)
    check_non_claimants_see_the_same(records, full_events(table_server, table_id))


def test_a_flood_of_commands_is_answered_one_by_one_and_the_stream_goes_on(table_server: TableServer) -> None:
    """More commands than may wait at once, sent without reading: each gets exactly one answer
    (refused beyond the commands in flight, or beyond the answers a stream holds unsent: it
    stops reading until its client reads), and the feed goes on after them."""
    table_id = table_server.open_table(PLAYERS)
    client = PlayClient(table_server.stub_for("east"), table_id)
    first = next_of(client, "update").update
    keys = [f"flood-{index}" for index in range(100)]
    for key in keys:
        request = messages.ActRequest(idempotency_key=key)
        request.leave.SetInParent()
        request.table_id = "another-table"  # refused, writes nothing
        client.send(request)
    answers = [next_of(client, "answer").answer for _ in keys]
    assert sorted(answer.idempotency_key for answer in answers) == sorted(keys)
    refusals = {grpc.StatusCode.INVALID_ARGUMENT.value[0], grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]}
    assert {answer.code for answer in answers} <= refusals
    good = exchange(choose_command(first.view).exchange_three.tiles)  # type: ignore[union-attr]
    good.idempotency_key = "after-the-flood"
    client.send(good)
    assert next_of(client, "answer").answer.code == 0
    assert next_of(client, "update").update.view.sequence == first.view.sequence + 1
    client.close()


@pytest.mark.parametrize("feed", ["WatchView", "Play"])
def test_a_seat_asked_in_a_window_is_not_told_that_another_asked_seat_passed_rules_1_4(
    table_server: TableServer, feed: str
) -> None:
    """Two seats asked about one discard: when the other passes (an event hidden from this seat,
    taking none of its numbers), this seat's feed sends nothing, not an update without events whose
    deadline moved, which would tell it that someone else could claim the tile."""
    from mahjong_platform.database import transaction
    from mahjong_table.core.commands import Pass

    session_scope = lambda: transaction(table_server.session_factory)  # type: ignore[arg-type]  # noqa: E731
    engine = table_server.engine
    table_id, state = window_asking_several(table_server)
    assert state.window is not None and len(state.window.pending) >= 2, "no window asked two seats"
    watcher, *others = sorted(state.window.pending)
    stub = table_server.stub_for(PLAYERS[watcher])
    if feed == "Play":
        play = PlayClient(stub, table_id)
        updates = (
            response.update for response in play.responses if response.WhichOneof("response") == "update"
        )
    else:
        updates = iter(stub.WatchView(messages.WatchViewRequest(table_id=table_id), timeout=60))
    first = next(updates)
    assert first.view.phase == "claim" and first.view.claimable_tile
    for seat in (*others, watcher):  # the others first, while this seat is still asked
        engine.act(session_scope, table_id, lambda _state, seat=seat: Pass(seat))  # type: ignore[arg-type,misc]
    state = engine.read_state(session_scope, table_id)
    while state.window is not None and state.window.pending:  # a later stage (a pong) may ask others
        pending = min(state.window.pending)
        command = lambda _state, seat=pending: Pass(seat)  # noqa: E731
        state, _envelopes, _answer = engine.act(session_scope, table_id, command)  # type: ignore[arg-type]
    after = next(updates)
    # The next update is the seat's own pass (and what followed), numbered right after the view.
    assert after.events and after.events[0].sequence == first.view.sequence + 1
    assert after.events[0].WhichOneof("payload") == "claim_passed"
    assert after.events[0].claim_passed.seat == watcher
