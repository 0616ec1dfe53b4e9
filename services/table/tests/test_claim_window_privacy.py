"""Claim windows leak nothing to the seats they do not ask (issue 17, ARCHITECTURE.md "Information
hiding"; RULES.md 1.4 and 2.1 claims).

Seeded games of both families are played through the real TableService by four bot threads that
pass some claims and take others. Every seat records its WatchView feed, the answers to its Acts,
and, right after each of its discards, the error of a second discard (a probe). The full event
stream (ops) tells which discards opened a window and whom it asked. Then, for every seat that a
window did not ask (the discarder included), the messages around a discard are compared with those
around discards that no seat could claim: the feed never stops inside a window, the discard arrives
with what followed it, the discarder's answer and its probe's error are of the same form, no view
shows the claim phase to a seat that is not asked, and the sequence numbers a seat receives have no
gap where another seat passed a claim.

The probe must be decided right after the window on its own discard, not in whatever state a loaded
machine reaches later: while a seat's discard and probe are in flight, no other seat sends a command
of its own turn (the bots hold one turn gate for those), only answers to that window's claims. So no
later window (one that may ask the prober, rightly told of its own window) and no later turn of the
prober can open before the probe is decided, and every probe is compared, none excused.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import uuid

import grpc
import pytest
from mahjong.v1 import envelope_pb2, table_service_pb2_grpc
from mahjong.v1 import table_service_pb2 as messages
from mahjong_platform.database import transaction
from mjctl.bots import choose_command

from .conftest import TableServer
from .test_formula_table_service import open_formula_table
from .test_table_service import PLAYERS

ANSWERS = frozenset({"claim_passed", "pong_claimed", "chow_claimed", "player_won", "turn_timed_out"})
WINDOW_ENDS = frozenset({"tile_drawn", "game_ended", "wall_exhausted", "tile_discarded"})


@dataclasses.dataclass
class SeatRecord:
    updates: list[messages.TableUpdate] = dataclasses.field(default_factory=list)
    discard_answers: list[messages.ActResponse] = dataclasses.field(default_factory=list)
    probes: dict[int, str] = dataclasses.field(default_factory=dict)
    """Discard sequence -> the error text of a second discard sent right after it."""


def choose(view: messages.TableView) -> messages.ActRequest | None:
    """The bots' command, except that about half of the claims are passed (so that windows also
    close with nobody claiming, the case that must look like no window at all)."""
    request = choose_command(view)
    kinds = {action.kind for action in view.legal_actions}
    if request is not None and "pass" in kinds and view.sequence % 2 == 0:
        request = messages.ActRequest(table_id=view.table_id, idempotency_key=str(uuid.uuid4()))
        getattr(request, "pass").SetInParent()
    return request


def play(server: TableServer, table_id: str) -> dict[int, SeatRecord]:
    records = {seat: SeatRecord() for seat in range(4)}

    def watch(seat: int) -> None:
        stream = server.stub_for(PLAYERS[seat]).WatchView(messages.WatchViewRequest(table_id=table_id))
        for update in stream:
            records[seat].updates.append(update)
            if update.view.phase == "ended":
                return

    turn_gate = threading.Lock()
    """Held by a seat's own-turn command (with the probe after a discard); claim answers skip it."""

    def act(seat: int) -> None:
        stub = server.stub_for(PLAYERS[seat])
        while True:
            view = stub.GetView(messages.GetViewRequest(table_id=table_id))
            if view.phase == "ended":
                return
            request = choose(view)
            if request is None:
                threading.Event().wait(0.01)
                continue
            request.expected_sequence = view.sequence
            if view.phase == "claim":
                send(seat, stub, request)
            else:
                with turn_gate:
                    send(seat, stub, request)

    def send(seat: int, stub: table_service_pb2_grpc.TableServiceStub, request: messages.ActRequest) -> None:
        try:
            answer = stub.Act(request)
        except grpc.RpcError as error:
            assert error.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ABORTED), error
            return
        if request.WhichOneof("command") == "discard":
            records[seat].discard_answers.append(answer)
            probe = messages.ActRequest(table_id=table_id, idempotency_key=str(uuid.uuid4()))
            probe.discard.tile = request.discard.tile
            with pytest.raises(grpc.RpcError) as refused:
                stub.Act(probe)
            records[seat].probes[answer.sequence] = refused.value.details()

    threads = [threading.Thread(target=target, args=(seat,)) for seat in range(4) for target in (watch, act)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    assert all(not thread.is_alive() for thread in threads), "the game did not end"
    return records


@dataclasses.dataclass(frozen=True)
class Window:
    discard_sequence: int
    discarder: int
    asked: frozenset[int]
    claimed: bool


def windows_of(events: list[envelope_pb2.Envelope]) -> dict[int, Window]:
    """Every discard of the game (full information): whom its window asked, whether one claimed."""
    windows = {}
    for index, envelope in enumerate(events):
        if envelope.WhichOneof("payload") != "tile_discarded":
            continue
        asked: set[int] = set()
        claimed = False
        for later in events[index + 1 :]:
            kind = later.WhichOneof("payload")
            if kind in WINDOW_ENDS:
                break
            if kind in ANSWERS:
                asked.add(getattr(later, kind).seat)
                claimed = claimed or (kind != "claim_passed" and kind != "turn_timed_out")
            if kind == "kong_declared":
                asked.add(later.kong_declared.seat)
                claimed = True
        windows[envelope.sequence] = Window(
            envelope.sequence, envelope.tile_discarded.seat, frozenset(asked), claimed
        )
    return windows


def stored_sequences(events: list[envelope_pb2.Envelope], seat: int) -> dict[int, int]:
    """A seat's own sequence number -> the stored one: events hidden from the seat (another seat's
    claim pass or claim timeout) take no number of the seat's."""
    numbers: dict[int, int] = {}
    for envelope in events:
        kind = envelope.WhichOneof("payload")
        hidden_kind = kind == "claim_passed" or (
            kind == "turn_timed_out" and envelope.turn_timed_out.phase == "claim"
        )
        if hidden_kind and getattr(envelope, str(kind)).seat != seat:
            continue
        numbers[len(numbers) + 1] = envelope.sequence
    return numbers


def template(text: str) -> str:
    return re.sub(r"[0-9][mpsz]|[0-9]+", "#", text)


def check_non_claimants_see_the_same(
    records: dict[int, SeatRecord], events: list[envelope_pb2.Envelope], merged: bool = False
) -> int:
    """`merged`: a seat's updates may each carry several changes, merged by when they came
    (`PlayOptions.hold_idle_updates_ms`); a discard's shape is then the events of its update up to
    the end of its window (what follows is the table moving on), without the view after them."""
    windows = windows_of(events)
    unclaimable = {sequence for sequence, window in windows.items() if not window.asked}
    passed = {sequence for sequence, window in windows.items() if window.asked and not window.claimed}
    assert unclaimable, "every game has discards nobody can claim"
    compared = 0
    for seat, record in records.items():
        # No gap: an event hidden from the seat (a claim passed) takes none of its sequence numbers.
        received = [event.sequence for update in record.updates for event in update.events]
        assert received == list(range(1, len(received) + 1)), f"seat {seat}: {received}"
        assert record.updates[-1].view.sequence == received[-1]
        stored = stored_sequences(events, seat)
        shapes: dict[int, tuple[tuple[str, ...], str]] = {}
        for update in record.updates:
            kinds = [event.WhichOneof("payload") for event in update.events]
            for position, event in enumerate(update.events):
                window = windows.get(stored[event.sequence])
                if window is None or seat in window.asked:
                    continue
                # The feed never stops inside a window that does not ask this seat.
                assert position + 1 < len(update.events), (
                    f"seat {seat}: update ends at discard {event.sequence}"
                )
                tail = kinds[position:]
                if merged:
                    ends = (index for index, kind in enumerate(tail) if index and kind in WINDOW_ENDS)
                    end = next(ends, len(tail) - 1)
                    tail = tail[: end + 1]
                shapes[stored[event.sequence]] = (tuple(tail), "" if merged else update.view.phase)
            if update.view.phase == "claim":
                assert update.view.claimable_tile, f"seat {seat} shown a window it is not asked in"
                assert len(update.view.legal_actions) > 1
        for sequence in passed:
            if seat not in windows[sequence].asked and sequence in shapes:
                assert shapes[sequence] in {shapes[other] for other in unclaimable if other in shapes}
                compared += 1
        for answer in record.discard_answers:
            assert [event.WhichOneof("payload") for event in answer.events] == ["tile_discarded"]
            assert answer.sequence == answer.events[0].sequence
        probes = {stored[sequence]: text for sequence, text in record.probes.items()}
        unclaimable_probes = {template(text) for sequence, text in probes.items() if sequence in unclaimable}
        for sequence, text in probes.items():
            # Decided after its own window and before any later one: no claim is ever named.
            assert "claim" not in text, text
            if sequence in passed:
                assert template(text) in unclaimable_probes, text
    return compared


def full_events(server: TableServer, table_id: str) -> list[envelope_pb2.Envelope]:
    ops = server.stub_for("operator", ("ops",))
    return list(ops.Watch(messages.WatchRequest(table_id=table_id), timeout=30))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sichuan_seats_not_asked_in_a_window_see_what_they_see_when_nobody_can_claim_rules_1_4(
    table_server: TableServer, seed: int
) -> None:
    table_id = table_server.open_table(PLAYERS, seed=seed)
    records = play(table_server, table_id)
    assert check_non_claimants_see_the_same(records, full_events(table_server, table_id)) > 0


@pytest.mark.parametrize("seed", [1, 2])
def test_formula_seats_not_asked_in_a_window_see_what_they_see_when_nobody_can_claim_rules_2_1(
    table_server: TableServer, seed: int
) -> None:
    table_id = open_formula_table(table_server, seed)
    records = play(table_server, table_id)
    check_non_claimants_see_the_same(records, full_events(table_server, table_id))


def test_a_seats_watch_sends_nothing_while_a_window_that_does_not_ask_it_is_open_rules_1_4(
    table_server: TableServer,
) -> None:
    """The per-seat Watch feed too: a seat not asked in a window receives the discard only once the
    window has closed (with the draw that follows it), never on its own as a sign that someone may
    claim. The reader is given a few seconds to show a discard early; a right server shows none."""
    from mahjong_table.core.commands import Pass
    from mahjong_table.selfplay import greedy_command

    session_scope = lambda: transaction(table_server.session_factory)  # type: ignore[arg-type]  # noqa: E731
    table_id = table_server.open_table(PLAYERS, seed=1)
    engine = table_server.engine
    state = engine.read_state(session_scope, table_id)
    while state.window is None or not state.window.pending:
        assert not state.is_over, "the game ended without a claim window"
        state, _envelopes, _answer = engine.act(session_scope, table_id, greedy_command)  # type: ignore[arg-type]
    assert state.window is not None
    pending = sorted(state.window.pending)
    seat = next(seat for seat in range(4) if seat not in pending)
    closed = threading.Event()
    discard_received = threading.Event()
    received: list[tuple[str, bool]] = []

    def read() -> None:
        stub = table_server.stub_for(PLAYERS[seat])
        for envelope in stub.Watch(messages.WatchRequest(table_id=table_id), timeout=120):
            received.append((str(envelope.WhichOneof("payload")), closed.is_set()))
            if envelope.WhichOneof("payload") == "tile_discarded":
                discard_received.set()
            if envelope.WhichOneof("payload") == "tile_drawn" and closed.is_set():
                return

    reader = threading.Thread(target=read)
    reader.start()
    discard_received.wait(3)  # long enough for a wrong server to send it
    closed.set()
    for claimant in pending:
        engine.act(session_scope, table_id, lambda _state, claimant=claimant: Pass(claimant))
    reader.join(600)
    assert not reader.is_alive()
    discards = [after_close for kind, after_close in received if kind == "tile_discarded"]
    assert discards[-1], f"seat {seat} was sent the discard while the window was open: {received}"
