"""`PlayOptions.hold_idle_updates_ms` on the real server: an update that gives the seat nothing to
decide is held and merged with the next, fewer messages for the same feed.

- Merged updates carry exactly the events separate updates carry, in the same order, each once,
  as Watch redacts them, and the last view; every answer still arrives once, before any update
  after its command.
- An update that gives the seat a decision is not held: with a hold far longer than any test
  waits (the limit raised for the test), every decision still arrives, and nothing else does but
  the first view and the end (so nothing else, a claim window hidden from the seat included,
  makes held updates go).
- What is held goes before an answer that goes alone.
- Claim windows reveal nothing through held streams (`test_claim_window_privacy`'s checks, each
  discard's events compared up to the end of its window), and with riding answers the
  discarder's answer still waits for the update after a window that does not ask it.
"""

from __future__ import annotations

import queue
import threading

import grpc
import pytest
from mahjong.v1 import table_service_pb2 as messages
from mahjong_platform.database import transaction
from mahjong_table import servicer as servicer_module
from mahjong_table.core.commands import Pass
from mahjong_table.selfplay import greedy_command
from mahjong_table.variants import view_for
from mahjong_table.visibility import window_hidden_from
from mahjong_table.wire import seat_sequence
from mjctl.client import answers_of

from .conftest import TableServer
from .test_claim_window_privacy import check_non_claimants_see_the_same, full_events, windows_of
from .test_formula_table_service import open_formula_table
from .test_play_options import _discard, _table_before_discard, _until
from .test_play_stream import REFUSALS, PlayClient, play_on_play_streams, privacy_records_on_play
from .test_table_service import PLAYERS

LONG_HOLD_MS = 600_000
"""Longer than any test here waits for a message (60 s): a held update that arrived came for a
reason other than its hold running out."""


def _updates(responses: list[messages.PlayResponse]) -> list[messages.TableUpdate]:
    return [response.update for response in responses if response.WhichOneof("response") == "update"]


def _check_feed(server: TableServer, table_id: str, received: dict[str, list[messages.PlayResponse]]) -> None:
    """Every event each seat may see arrived once, in order, as Watch redacts it, the last view is
    the seat's view of the ended table, and each answer came before any update showing its
    command's events."""
    for seat, player in enumerate(PLAYERS):
        updates = _updates(received[player])
        watched = list(server.stub_for(player).Watch(messages.WatchRequest(table_id=table_id), timeout=30))
        assert [event for update in updates for event in update.events] == watched
        assert updates[-1].view.phase == "ended"
        assert updates[-1].view == server.view(player, table_id)
        assert all(update.view.your_seat == seat for update in updates)
        for position, response in enumerate(received[player]):
            for answer in answers_of(response):
                assert answer.code == 0 or answer.code in REFUSALS, answer
                if answer.code or not answer.result.events:
                    continue
                first_event = answer.result.events[0].sequence
                earlier = _updates(received[player][:position])
                assert all(event.sequence < first_event for update in earlier for event in update.events)


@pytest.mark.parametrize("seed", [4, 5])
def test_held_updates_carry_every_event_once_in_order_and_fewer_messages(
    table_server: TableServer, seed: int
) -> None:
    held_table = table_server.open_table(PLAYERS, seed=seed)
    held = play_on_play_streams(table_server, held_table, messages.PlayOptions(hold_idle_updates_ms=1000))
    _check_feed(table_server, held_table, held)
    # The same game (the same seed and bots) without the hold, for the number of updates.
    separate = play_on_play_streams(table_server, table_server.open_table(PLAYERS, seed=seed))
    assert sum(len(_updates(r)) for r in held.values()) < sum(len(_updates(r)) for r in separate.values())


def _kinds(view: messages.TableView) -> list[str]:
    return [action.kind for action in view.legal_actions]


def _decides(state: object, seat: int) -> bool:
    """The seat may do more than leave (which it may at any moment, RULES.md 1.10)."""
    return any(action.kind != "leave" for action in view_for(state, seat).legal_actions)  # type: ignore[arg-type]


class _Reader:
    """A Play stream read on a thread: what it received, in order."""

    def __init__(self, client: PlayClient) -> None:
        self.client = client
        self.received: queue.Queue[messages.PlayResponse] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for response in self.client.responses:
                self.received.put(response)
        except grpc.RpcError:
            pass  # cancelled at the end of the test

    def next(self) -> messages.PlayResponse:
        return self.received.get(timeout=60)


def test_a_decision_is_never_held_and_nothing_else_but_the_first_view_and_the_end_goes_rules_1_4(
    table_server: TableServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A seeded game played greedily through the engine, one command at a time, while one seat's
    Play stream holds idle updates for ten minutes: each time a command gives the seat a decision,
    the seat receives it (the view the engine shows it, with every event since) without the
    hold; nothing else reaches it before the end, not the table moving on without it, and not a
    claim window that does not ask it opening or closing."""
    monkeypatch.setattr(servicer_module, "PLAY_HOLD_IDLE_UPDATES_MS_MAX", LONG_HOLD_MS)
    scope = lambda: transaction(table_server.session_factory)  # type: ignore[arg-type]  # noqa: E731
    engine = table_server.engine
    table_id = table_server.open_table(PLAYERS, seed=1)
    seat = 2
    stub = table_server.stub_for(PLAYERS[seat])
    reader = _Reader(
        PlayClient(stub, table_id, options=messages.PlayOptions(hold_idle_updates_ms=LONG_HOLD_MS))
    )
    updates = [reader.next().update]
    state = engine.read_state(scope, table_id)  # type: ignore[arg-type]
    decisions = 0
    while not state.is_over:
        state, _envelopes, _answer = engine.act(scope, table_id, greedy_command)  # type: ignore[arg-type]
        sequence = seat_sequence(state, seat)
        if state.is_over or (
            not window_hidden_from(state, seat)
            and _decides(state, seat)
            and sequence > updates[-1].view.sequence
        ):
            update = reader.next().update
            assert update.view.sequence == sequence
            if not state.is_over:
                assert _kinds(update.view) == [action.kind for action in view_for(state, seat).legal_actions]
                decisions += 1
            updates.append(update)
    assert updates[-1].view.phase == "ended"
    assert reader.received.empty()
    assert all(set(_kinds(update.view)) - {"leave"} for update in updates[1:-1])
    watched = list(stub.Watch(messages.WatchRequest(table_id=table_id), timeout=30))
    assert [event for update in updates for event in update.events] == watched
    assert decisions > 5
    events = full_events(table_server, table_id)
    assert any(window.asked and seat not in window.asked for window in windows_of(events).values()), (
        "no window that did not ask the seat: the seed shows nothing"
    )
    reader.client.close()


def _after_feeds_woke(server: TableServer) -> None:
    """Return once the server's streams woken by every change committed so far have taken it in."""
    assert server.servicer is not None
    taken_in = threading.Event()
    assert server.servicer.wakeups.call_after_wakeups(taken_in.set), "no stream waits on the server"
    assert taken_in.wait(60), "the server's loop did not run the wake-ups"


def test_what_is_held_goes_before_an_answer_that_goes_alone(
    table_server: TableServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(servicer_module, "PLAY_HOLD_IDLE_UPDATES_MS_MAX", LONG_HOLD_MS)
    scope = lambda: transaction(table_server.session_factory)  # type: ignore[arg-type]  # noqa: E731
    engine = table_server.engine
    table_id = table_server.open_table(PLAYERS, seed=1)
    stub = table_server.stub_for("east")
    reader = _Reader(
        PlayClient(stub, table_id, options=messages.PlayOptions(hold_idle_updates_ms=LONG_HOLD_MS))
    )
    first = reader.next().update
    # East picks its exchange tiles, then two others pick theirs: east has nothing to decide
    # meanwhile (but leave), so those updates are held.
    state = engine.read_state(scope, table_id)  # type: ignore[arg-type]
    for _ in range(3):
        assert not window_hidden_from(state, 0)
        state, _envelopes, _answer = engine.act(scope, table_id, greedy_command)  # type: ignore[arg-type]
    assert not _decides(state, 0), "east still has its pick to make"
    held_up_to = seat_sequence(state, 0)
    assert held_up_to == first.view.sequence + 3
    # The refusal is sent once east's feed has taken in the last change (its wake-up is handed to
    # the server's loop after the commit; the request could otherwise be read first, and what is
    # held would then rightly stop one change earlier).
    _after_feeds_woke(table_server)
    refused = messages.ActRequest(idempotency_key="refused-1")
    refused.leave.SetInParent()
    refused.table_id = "another-table"  # refused at once, writes nothing
    reader.client.send(refused)
    update = reader.next()
    assert update.WhichOneof("response") == "update", update
    assert update.update.view.sequence == held_up_to
    assert [event.sequence for event in update.update.events] == list(
        range(first.view.sequence + 1, held_up_to + 1)
    )
    answer = reader.next()
    assert answer.WhichOneof("response") == "answer" and answer.answer.idempotency_key == "refused-1"
    assert answer.answer.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert reader.received.empty()
    reader.client.close()


@pytest.mark.parametrize("seed", [1, 2])
def test_sichuan_seats_not_asked_in_a_window_see_nothing_of_it_with_held_updates_rules_1_4(
    table_server: TableServer, seed: int
) -> None:
    table_id = table_server.open_table(PLAYERS, seed=seed)
    records = privacy_records_on_play(table_server, table_id, messages.PlayOptions(hold_idle_updates_ms=200))
    assert check_non_claimants_see_the_same(records, full_events(table_server, table_id), merged=True) > 0


def test_formula_seats_not_asked_in_a_window_see_nothing_of_it_with_held_updates_rules_2_1(
    table_server: TableServer,
) -> None:
    table_id = open_formula_table(table_server, 1)
    records = privacy_records_on_play(table_server, table_id, messages.PlayOptions(hold_idle_updates_ms=200))
    check_non_claimants_see_the_same(records, full_events(table_server, table_id), merged=True)


def test_a_discard_a_hidden_window_follows_is_answered_riding_on_the_update_after_it_when_held_rules_1_4(
    table_server: TableServer,
) -> None:
    """The discarder (riding answers, updates held 50 ms) is not asked in the window its discard
    opened: its answer waits for the update after the window, as without the hold, and nothing
    that goes meanwhile carries it. (Nothing is held for the discarder then: its view before the
    discard asked it to decide, so it went at once; a held update that goes because its hold ran
    out never carries riding answers anyway.)"""
    table_id, seat, tile = _table_before_discard(table_server, opens_window=True)
    options = messages.PlayOptions(answers_with_updates=True, hold_idle_updates_ms=50)
    reader = _Reader(PlayClient(table_server.stub_for(PLAYERS[seat]), table_id, options=options))
    reader.next()
    request = _discard(table_id, tile)
    reader.client.send(request)
    engine, scope = table_server.engine, lambda: transaction(table_server.session_factory)  # type: ignore[arg-type]
    _until(lambda: engine.read_state(scope, table_id).window is not None, "the discard opened no window")  # type: ignore[arg-type]
    threading.Event().wait(40 * servicer_module.PLAY_ANSWER_RIDE_SECONDS)
    while not reader.received.empty():
        early = reader.received.get()
        assert not answers_of(early), "an answer went while the window was open"
    state = engine.read_state(scope, table_id)  # type: ignore[arg-type]
    while state.window is not None and state.window.pending:
        pending = min(state.window.pending)
        state, _envelopes, _answer = engine.act(scope, table_id, lambda _state, s=pending: Pass(s))  # type: ignore[arg-type,misc]
    response = reader.next()
    assert response.WhichOneof("response") == "update"
    assert [answer.idempotency_key for answer in response.answers] == [request.idempotency_key]
    assert response.update.events[0].WhichOneof("payload") == "tile_discarded"
    reader.client.close()


def test_riding_answers_with_held_updates_still_arrive_once_and_before_their_updates(
    table_server: TableServer,
) -> None:
    options = messages.PlayOptions(answers_with_updates=True, hold_idle_updates_ms=1000)
    table_id = table_server.open_table(PLAYERS, seed=4)
    received = play_on_play_streams(table_server, table_id, options)
    _check_feed(table_server, table_id, received)
    assert any(response.answers for responses in received.values() for response in responses)
