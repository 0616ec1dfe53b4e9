"""MatchmakingService end to end over gRPC: tickets, tables of four, bad input, idempotency."""

from __future__ import annotations

import threading
from collections.abc import Callable

import grpc
import pytest
import sqlalchemy
from mahjong.v1 import matchmaking_service_pb2 as messages
from mahjong.v1 import table_events_pb2
from mahjong_matchmaking import servicer as servicer_module
from mahjong_matchmaking import tickets as tickets_module
from mahjong_matchmaking.catalog import load_catalog
from mahjong_matchmaking.models import room_queues
from mahjong_matchmaking.models import tickets as tickets_table
from mahjong_matchmaking.projection import seat_release_handler
from mahjong_matchmaking.servicer import SeatReleases
from mahjong_platform.database import transaction
from mahjong_platform.envelopes import new_envelope, utc_now
from mahjong_platform.errors import FailedPreconditionError
from mahjong_platform.idempotency import request_digest
from mahjong_platform.schema import stored_events
from mahjong_platform.tracked_consumer import MessagePosition

from .conftest import Matchmaking


def event_types(matchmaking: Matchmaking) -> list[str]:
    with transaction(matchmaking.session_factory) as session:
        return list(
            session.execute(
                sqlalchemy.select(stored_events.c.event_type).order_by(stored_events.c.recorded_at)
            ).scalars()
        )


def test_list_rooms_serves_the_catalog(matchmaking: Matchmaking) -> None:
    rooms = matchmaking.stub_for("alice").ListRooms(messages.ListRoomsRequest()).rooms
    assert "sichuan-novice" in [room.room_id for room in rooms]


def test_four_tickets_of_one_room_form_a_table_in_queue_order(
    matchmaking: Matchmaking, enqueue: Callable[..., str]
) -> None:
    ticket_ids = [enqueue(player) for player in ("p0", "p1", "p2", "p3")]
    updates = [
        next(iter(matchmaking.stub_for(player).WatchTicket(messages.WatchTicketRequest(ticket_id=ticket))))
        for player, ticket in zip(("p0", "p1", "p2", "p3"), ticket_ids, strict=True)
    ]
    assert [update.state for update in updates] == ["seated"] * 4
    assert len({update.table_id for update in updates}) == 1
    assert [update.seat for update in updates] == [0, 1, 2, 3]
    assert event_types(matchmaking).count("TableAssigned") == 1
    assert event_types(matchmaking).count("TicketQueued") == 4


def test_a_fifth_player_waits_for_the_next_table(
    matchmaking: Matchmaking, enqueue: Callable[..., str]
) -> None:
    for player in ("p0", "p1", "p2", "p3"):
        enqueue(player)
    ticket = enqueue("p4")
    update = next(iter(matchmaking.stub_for("p4").WatchTicket(messages.WatchTicketRequest(ticket_id=ticket))))
    assert update.state == "queued"


def test_a_player_with_a_live_ticket_cannot_queue_twice(
    matchmaking: Matchmaking, enqueue: Callable[..., str]
) -> None:
    enqueue("alice")
    with pytest.raises(grpc.RpcError) as raised:
        enqueue("alice", "sichuan-cap64")
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "already queued for room 'sichuan-novice'" in raised.value.details()


def test_a_seated_player_cannot_queue_until_the_game_ends(
    matchmaking: Matchmaking, enqueue: Callable[..., str]
) -> None:
    ticket = enqueue("p0")
    for player in ("p1", "p2", "p3"):
        enqueue(player)
    with pytest.raises(grpc.RpcError) as raised:
        enqueue("p0", "sichuan-cap64")
    assert "already seated" in raised.value.details()
    update = next(iter(matchmaking.stub_for("p0").WatchTicket(messages.WatchTicketRequest(ticket_id=ticket))))
    ended = new_envelope(
        table_events_pb2.GameEnded(reason="three_wins"), clock=utc_now, stream_id=update.table_id
    )
    with transaction(matchmaking.session_factory) as session:
        seat_release_handler()(session, ended, MessagePosition("t", 0, 0))
    assert enqueue("p0", "sichuan-cap64")


class WatchedReleases(SeatReleases):
    """The servicer's seat releases, telling the test when an Enqueue waits on them."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    async def wait(self, table_id: str, seen_generation: int, timeout_seconds: float) -> None:
        self.waiting.set()
        await super().wait(table_id, seen_generation, timeout_seconds)


HANG_SECONDS = 60.0
"""A bound on a hang, not a timing check: the waits below end within milliseconds when they work."""


def seat_a_table(matchmaking: Matchmaking, enqueue: Callable[..., str]) -> str:
    """Seat p0..p3 at a table; its id."""
    ticket = enqueue("p0")
    for player in ("p1", "p2", "p3"):
        enqueue(player)
    update = next(iter(matchmaking.stub_for("p0").WatchTicket(messages.WatchTicketRequest(ticket_id=ticket))))
    assert update.state == "seated"
    return str(update.table_id)


@pytest.mark.parametrize("notified", [True, False], ids=["this-process-consumer", "another-replica"])
def test_an_enqueue_of_a_player_whose_seat_is_being_freed_is_answered_once_it_is(
    matchmaking: Matchmaking, enqueue: Callable[..., str], notified: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The players of a game that just ended enqueue again before matchmaking has read its
    GameEnded: the call waits for the seat release (woken by this process's consumer, or finding
    it at a re-read when another replica's consumer applied it) instead of being refused. Woken by
    the consumer, it needs no periodic re-read (out of the way here)."""
    if notified:
        monkeypatch.setattr(servicer_module, "SEAT_RECHECK_SECONDS", HANG_SECONDS)
    table_id = seat_a_table(matchmaking, enqueue)
    releases = WatchedReleases()
    matchmaking.servicer.seat_releases = releases
    matchmaking.servicer.seat_release_wait_seconds = HANG_SECONDS
    answer: list[str] = []
    call = threading.Thread(target=lambda: answer.append(enqueue("p0", "sichuan-cap64")), daemon=True)
    call.start()
    assert releases.waiting.wait(HANG_SECONDS), "the Enqueue of a seated player did not wait"
    ended = new_envelope(table_events_pb2.GameEnded(reason="three_wins"), clock=utc_now, stream_id=table_id)
    on_released = releases.notify if notified else None
    with transaction(matchmaking.session_factory) as session:
        seat_release_handler(on_released=on_released)(session, ended, MessagePosition("t", 0, 0))
    call.join(HANG_SECONDS)
    assert len(answer) == 1 and answer[0], "the Enqueue was not answered with a ticket"


def test_a_watch_of_a_queued_ticket_is_woken_by_the_enqueue_that_seats_it_and_by_no_other(
    matchmaking: Matchmaking, enqueue: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the periodic re-read out of the way, the stream reads its ticket once, when it opens:
    the Enqueue that seats it wakes it with the seated ticket; the Enqueues of other rooms and
    players that did not seat it did not wake it (each woke every stream of the process before,
    and each stream read its ticket again)."""
    monkeypatch.setattr(servicer_module, "WATCH_POLL_SECONDS", HANG_SECONDS)
    reads: list[str] = []
    load_ticket = tickets_module.load_ticket

    def counted(session: object, ticket_id: str) -> object:
        reads.append(ticket_id)
        return load_ticket(session, ticket_id)  # type: ignore[arg-type]

    monkeypatch.setattr(tickets_module, "load_ticket", counted)
    ticket = enqueue("p0")
    stream = matchmaking.stub_for("p0").WatchTicket(
        messages.WatchTicketRequest(ticket_id=ticket), timeout=HANG_SECONDS
    )
    assert next(stream).state == "queued"
    for player in ("q1", "q2", "q3"):
        enqueue(player, "sichuan-cap64")
    for player in ("p1", "p2"):
        enqueue(player)
    assert reads == [ticket]
    enqueue("p3")
    update = next(stream)
    assert (update.state, update.seat, update.room_id) == ("seated", 0, "sichuan-novice")
    assert update.table_id
    assert reads == [ticket]
    assert list(stream) == []  # the stream ended: its wait is forgotten
    assert matchmaking.servicer.watchers.watched() == 0
    fresh = matchmaking.stub_for("p0").WatchTicket(messages.WatchTicketRequest(ticket_id=ticket))
    assert next(iter(fresh)) == update, "the ticket handed over is not the ticket stored"


def test_the_watched_tickets_are_read_again_together_and_a_change_another_replica_made_reaches_each_stream(
    matchmaking: Matchmaking, enqueue: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three queued tickets, three open streams; another replica cancels the tickets (a write
    this process's watchers are not told of): the periodic re-read finds the change, each stream
    sends it and ends, and every re-read was one read of all the watched tickets, not one per
    stream."""
    rereads: list[list[str]] = []
    load_tickets = tickets_module.load_tickets

    def counted(session: object, ticket_ids: list[str]) -> object:
        rereads.append(sorted(ticket_ids))
        return load_tickets(session, ticket_ids)  # type: ignore[arg-type]

    monkeypatch.setattr(tickets_module, "load_tickets", counted)
    players = {"p0": "sichuan-novice", "p1": "sichuan-cap64", "p2": "sichuan-cap64-practice"}
    ticket_of = {player: enqueue(player, room) for player, room in players.items()}
    streams = {
        player: iter(
            matchmaking.stub_for(player).WatchTicket(
                messages.WatchTicketRequest(ticket_id=ticket), timeout=HANG_SECONDS
            )
        )
        for player, ticket in ticket_of.items()
    }
    assert all(next(stream).state == "queued" for stream in streams.values())
    watching_all = threading.Event()
    original_ids = matchmaking.servicer.watchers.ticket_ids

    def ids() -> list[str]:
        watched = original_ids()
        if len(watched) == len(ticket_of):
            watching_all.set()
        return watched

    monkeypatch.setattr(matchmaking.servicer.watchers, "ticket_ids", ids)
    assert watching_all.wait(HANG_SECONDS), "the streams' tickets were not re-read"
    with transaction(matchmaking.session_factory) as session:
        for player, ticket in ticket_of.items():
            tickets_module.cancel(session, matchmaking.servicer._store, ticket, player, utc_now)
    for player, stream in streams.items():
        update = next(stream)
        assert (update.ticket_id, update.state) == (ticket_of[player], "cancelled")
        assert list(stream) == []
    assert rereads, "no periodic re-read"
    assert sorted(ticket_of.values()) in rereads, "the watched tickets were not read in one query"
    assert all(len(read) <= len(ticket_of) for read in rereads)
    assert matchmaking.servicer.watchers.watched() == 0


def test_a_seat_release_notifies_once_after_its_commit_and_never_after_a_rollback(
    matchmaking: Matchmaking, enqueue: Callable[..., str]
) -> None:
    table_id = seat_a_table(matchmaking, enqueue)
    calls: list[frozenset[str]] = []
    handler = seat_release_handler(on_released=calls.append)
    ended = new_envelope(table_events_pb2.GameEnded(reason="three_wins"), clock=utc_now, stream_id=table_id)
    left = new_envelope(table_events_pb2.PlayerLeft(seat=1), clock=utc_now, stream_id=table_id)
    with pytest.raises(RuntimeError), transaction(matchmaking.session_factory) as session:
        handler(session, ended, MessagePosition("t", 0, 0))
        raise RuntimeError("the batch failed")
    assert calls == []
    with transaction(matchmaking.session_factory) as session:
        handler(session, left, MessagePosition("t", 0, 0))
        handler(session, ended, MessagePosition("t", 0, 1))
        assert calls == [], "notified before the commit: a woken Enqueue would still see the seat"
    assert calls == [frozenset({table_id})]
    with transaction(matchmaking.session_factory) as session:
        handler(session, ended, MessagePosition("t", 0, 2))  # frees nothing more
    assert calls == [frozenset({table_id})]


def test_a_seated_player_is_refused_without_asking_the_ledger_or_taking_a_queue_place(
    matchmaking: Matchmaking, enqueue: Callable[..., str]
) -> None:
    """Players retry Enqueue while matchmaking has not yet read their GameEnded: each refusal is
    a read, not a ledger call and a write transaction that rolls back."""
    for player in ("p0", "p1", "p2", "p3"):
        enqueue(player)
    assert matchmaking.balance_lookups == ["p0", "p1", "p2", "p3"]
    before = event_types(matchmaking)
    with transaction(matchmaking.session_factory) as session:
        queues_before = session.execute(sqlalchemy.select(room_queues)).all()
    for _ in range(3):
        with pytest.raises(grpc.RpcError) as raised:
            enqueue("p0", "sichuan-cap64")
        assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "already seated in room 'sichuan-novice'" in raised.value.details()
    assert matchmaking.balance_lookups == ["p0", "p1", "p2", "p3"]
    assert event_types(matchmaking) == before
    with transaction(matchmaking.session_factory) as session:
        assert session.execute(sqlalchemy.select(room_queues)).all() == queues_before


def test_a_retried_enqueue_returns_the_first_ticket_and_queues_nothing(matchmaking: Matchmaking) -> None:
    stub = matchmaking.stub_for("alice")
    request = messages.EnqueueRequest(room_id="sichuan-novice", idempotency_key="k1")
    assert stub.Enqueue(request).ticket_id == stub.Enqueue(request).ticket_id
    assert event_types(matchmaking).count("TicketQueued") == 1


def ticket_count(matchmaking: Matchmaking) -> int:
    with transaction(matchmaking.session_factory) as session:
        return int(
            session.execute(sqlalchemy.select(sqlalchemy.func.count()).select_from(tickets_table)).scalar()
        )


def test_a_retry_that_raced_past_the_earlier_answer_check_is_answered_the_first_answer_and_writes_nothing(
    matchmaking: Matchmaking,
) -> None:
    """The write transaction no longer reads the earlier answer first: a retry that passed the
    read-only check before its first call committed reaches it, and is answered the first ticket,
    whether it finds that ticket live (under the room's lock) or, the ticket gone, the key taken
    when it stores its answer; all it wrote is rolled back."""
    stub = matchmaking.stub_for("alice")
    request = messages.EnqueueRequest(room_id="sichuan-novice", idempotency_key="k1")
    first = stub.Enqueue(request).ticket_id
    room = load_catalog()["sichuan-novice"]
    digest = request_digest(request)
    answer, seated = matchmaking.servicer._enqueue("alice", room, "k1", digest, None)
    assert (answer.ticket_id, seated) == (first, [])
    stub.Cancel(messages.CancelRequest(ticket_id=first, idempotency_key="c1"))
    answer, seated = matchmaking.servicer._enqueue("alice", room, "k1", digest, None)
    assert (answer.ticket_id, seated) == (first, [])
    assert ticket_count(matchmaking) == 1
    assert event_types(matchmaking).count("TicketQueued") == 1
    other = request_digest(messages.EnqueueRequest(room_id="sichuan-cap64", idempotency_key="k1"))
    with pytest.raises(FailedPreconditionError):
        matchmaking.servicer._enqueue("alice", load_catalog()["sichuan-cap64"], "k1", other, None)
    assert ticket_count(matchmaking) == 1


def test_cancel_takes_the_ticket_out_of_the_queue(
    matchmaking: Matchmaking, enqueue: Callable[..., str]
) -> None:
    ticket = enqueue("alice")
    stub = matchmaking.stub_for("alice")
    stub.Cancel(messages.CancelRequest(ticket_id=ticket, idempotency_key="c1"))
    update = next(iter(stub.WatchTicket(messages.WatchTicketRequest(ticket_id=ticket))))
    assert update.state == "cancelled"
    for player in ("p1", "p2", "p3"):
        enqueue(player)
    assert "TableAssigned" not in event_types(matchmaking)


@pytest.mark.parametrize(
    ("player", "request_", "code", "message"),
    [
        (
            "alice",
            messages.EnqueueRequest(room_id="nowhere", idempotency_key="k"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "unknown room 'nowhere'",
        ),
        (
            "alice",
            messages.EnqueueRequest(room_id="sichuan-novice"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "idempotency_key",
        ),
        (
            None,
            messages.EnqueueRequest(room_id="sichuan-novice", idempotency_key="k"),
            grpc.StatusCode.UNAUTHENTICATED,
            "authorization",
        ),
    ],
)
def test_bad_enqueues_get_a_clear_status_and_change_nothing(
    matchmaking: Matchmaking,
    player: str | None,
    request_: messages.EnqueueRequest,
    code: grpc.StatusCode,
    message: str,
) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        matchmaking.stub_for(player).Enqueue(request_)
    assert raised.value.code() == code
    assert message in raised.value.details()
    assert event_types(matchmaking) == []


def test_a_balance_below_the_entry_floor_is_refused_naming_both(matchmaking: Matchmaking) -> None:
    matchmaking.balances["poor"] = 1_999  # sichuan-novice floor is 2,000 beans (RULES.md 3)
    with pytest.raises(grpc.RpcError) as raised:
        matchmaking.stub_for("poor").Enqueue(
            messages.EnqueueRequest(room_id="sichuan-novice", idempotency_key="k")
        )
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "1999" in raised.value.details() and "2000" in raised.value.details()


def test_others_cannot_watch_or_cancel_your_ticket(
    matchmaking: Matchmaking, enqueue: Callable[..., str]
) -> None:
    ticket = enqueue("alice")
    with pytest.raises(grpc.RpcError) as raised:
        next(iter(matchmaking.stub_for("mallory").WatchTicket(messages.WatchTicketRequest(ticket_id=ticket))))
    assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as raised:
        matchmaking.stub_for("mallory").Cancel(messages.CancelRequest(ticket_id=ticket, idempotency_key="x"))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_formula_room_takes_tickets_now_that_the_engine_plays_it(matchmaking: Matchmaking) -> None:
    ticket = matchmaking.stub_for("alice", member=True).Enqueue(
        messages.EnqueueRequest(room_id="formula-fan", idempotency_key="k")
    )
    assert ticket.ticket_id


def test_a_non_member_is_refused_a_members_only_room_naming_the_program_and_nothing_is_written_rules_3(
    matchmaking: Matchmaking,
) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        matchmaking.stub_for("bob").Enqueue(
            messages.EnqueueRequest(room_id="formula-fan", idempotency_key="k")
        )
    assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "Happy Points" in raised.value.details() and "欢乐积分计划" in raised.value.details()
    with transaction(matchmaking.session_factory) as session:
        assert (
            session.execute(sqlalchemy.select(sqlalchemy.func.count()).select_from(tickets_table)).scalar()
            == 0
        )
    # The same key works once the player is a member: the refusal stored no answer.
    ticket = matchmaking.stub_for("bob", member=True).Enqueue(
        messages.EnqueueRequest(room_id="formula-fan", idempotency_key="k")
    )
    assert ticket.ticket_id
    # Sichuan rooms are open to everyone.
    assert (
        matchmaking.stub_for("carol")
        .Enqueue(messages.EnqueueRequest(room_id="sichuan-novice", idempotency_key="k"))
        .ticket_id
    )


def test_one_idempotency_rule_same_request_first_answer_other_request_refused(
    matchmaking: Matchmaking,
) -> None:
    stub = matchmaking.stub_for("erin")
    first = stub.Enqueue(messages.EnqueueRequest(room_id="sichuan-novice", idempotency_key="k"))
    assert stub.Enqueue(messages.EnqueueRequest(room_id="sichuan-novice", idempotency_key="k")) == first
    with pytest.raises(grpc.RpcError) as raised:
        stub.Enqueue(messages.EnqueueRequest(room_id="sichuan-cap64", idempotency_key="k"))
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    cancel = messages.CancelRequest(ticket_id=first.ticket_id, idempotency_key="c")
    assert stub.Cancel(cancel) == stub.Cancel(cancel)
    with pytest.raises(grpc.RpcError) as raised:
        stub.Cancel(messages.CancelRequest(ticket_id="another", idempotency_key="c"))
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as raised:
        stub.Enqueue(messages.EnqueueRequest(room_id="sichuan-novice", idempotency_key="grant:erin"))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_list_rooms_marks_the_rooms_the_caller_may_enter_rules_3(matchmaking: Matchmaking) -> None:
    def enterable(member: bool) -> dict[str, bool]:
        rooms = matchmaking.stub_for("dave", member=member).ListRooms(messages.ListRoomsRequest()).rooms
        return {room.room_id: room.caller_may_enter for room in rooms}

    outsider, member = enterable(False), enterable(True)
    assert all(member.values())
    assert {room for room, may in outsider.items() if not may} == {
        "formula-fan",
        "formula-fan-plus-8",
        "formula-flat-10",
    }
    rooms = matchmaking.stub_for("dave").ListRooms(messages.ListRoomsRequest()).rooms
    assert {room.room_id: room.rules.members_only for room in rooms if room.rules.members_only} == {
        "formula-fan": True,
        "formula-fan-plus-8": True,
        "formula-flat-10": True,
    }
