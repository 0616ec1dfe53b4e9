"""Tickets and seat assignment: the matchmaking use cases, with their dependencies passed in.

Each call runs in one transaction that appends the events to the event store (and so to the outbox,
then `mahjong.match.v1`) and updates the ticket projection together: what a client is told and what
the rest of the system hears never disagree.
"""

from __future__ import annotations

import dataclasses
import datetime
import secrets
import uuid
from collections.abc import Awaitable, Callable

import sqlalchemy
from mahjong.v1 import envelope_pb2, match_events_pb2, matchmaking_service_pb2
from mahjong_platform import idempotency
from mahjong_platform.database import PerDialect, compiled_once, one_of
from mahjong_platform.envelopes import new_envelope
from mahjong_platform.errors import FailedPreconditionError, NotFoundError
from mahjong_platform.event_store import EventStore
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from mahjong_matchmaking.catalog import Room
from mahjong_matchmaking.models import (
    LIVE_TICKET_STATES,
    TICKET_CANCELLED,
    TICKET_FINISHED,
    TICKET_QUEUED,
    TICKET_SEATED,
    idempotent_answers,
    room_queues,
    tickets,
)

SEATS_PER_TABLE = 4
IDEMPOTENCY_KEY_MAX_LENGTH = 128
Clock = Callable[[], datetime.datetime]
BalanceLookup = Callable[[str], Awaitable[int]]
"""Balance in beans of a player (the ledger, asked on the server's event loop); consulted for the
room's entry floor (RULES.md 1.9)."""


@dataclasses.dataclass(frozen=True)
class Ticket:
    ticket_id: str
    player_id: str
    room_id: str
    state: str
    table_id: str | None
    seat: int | None

    def to_update(self) -> matchmaking_service_pb2.TicketUpdate:
        return matchmaking_service_pb2.TicketUpdate(
            ticket_id=self.ticket_id,
            state=self.state,
            table_id=self.table_id or "",
            seat=-1 if self.seat is None else self.seat,
            room_id=self.room_id,
        )


def check_idempotency_key(key: str) -> None:
    """INVALID_ARGUMENT for an empty, over-long or reserved key (`mahjong_platform.idempotency`)."""
    idempotency.check_idempotency_key(key, IDEMPOTENCY_KEY_MAX_LENGTH)


def first_answer(session: Session, player_id: str, method: str, key: str, digest: str) -> bytes | None:
    """The stored answer of an earlier call with this idempotency key, if any; FAILED_PRECONDITION
    when that call asked something else (`mahjong_platform.idempotency`)."""
    row = session.execute(
        _FIRST_ANSWER, {"answer_player_id": player_id, "answer_method": method, "answer_key": key}
    ).first()
    if row is None:
        return None
    return idempotency.replay_answer(method, row.request_digest, digest, bytes(row.answer))


def remember_answer(
    session: Session, player_id: str, method: str, key: str, digest: str, answer: bytes
) -> None:
    session.execute(
        _INSERT_ANSWER,
        {
            "player_id": player_id,
            "method": method,
            "idempotency_key": key,
            "request_digest": digest,
            "answer": answer,
        },
    )


def load_ticket(session: Session, ticket_id: str) -> Ticket | None:
    row = session.execute(_LOAD_TICKET, {"wanted_ticket_id": ticket_id}).first()
    if row is None:
        return None
    return Ticket(row.ticket_id, row.player_id, row.room_id, row.state, row.table_id, row.seat)


LOAD_TICKETS_PER_QUERY = 1000


def load_tickets(session: Session, ticket_ids: list[str]) -> list[Ticket]:
    """The tickets of `ticket_ids` that exist, a query per LOAD_TICKETS_PER_QUERY of them."""
    statement = _LOAD_TICKETS(session)
    return [
        Ticket(row.ticket_id, row.player_id, row.room_id, row.state, row.table_id, row.seat)
        for start in range(0, len(ticket_ids), LOAD_TICKETS_PER_QUERY)
        for row in session.execute(
            statement, {"wanted_ticket_ids": ticket_ids[start : start + LOAD_TICKETS_PER_QUERY]}
        )
    ]


@dataclasses.dataclass(frozen=True)
class LiveTicket:
    """A player's queued or seated ticket (a player has at most one)."""

    ticket_id: str
    state: str
    room_id: str
    table_id: str | None  # a seated ticket's table


def live_ticket(session: Session, player_id: str) -> LiveTicket | None:
    """The player's live ticket or seat, if any."""
    live = session.execute(_LIVE_TICKET, {"live_player_id": player_id}).first()
    return None if live is None else LiveTicket(live.ticket_id, live.state, live.room_id, live.table_id)


def refuse_a_live_player(session: Session, player_id: str) -> None:
    """FAILED_PRECONDITION when the player already has a live ticket or seat."""
    live = live_ticket(session, player_id)
    if live is not None:
        raise live_player_refused(player_id, live)


def live_player_refused(player_id: str, live: LiveTicket) -> FailedPreconditionError:
    """The refusal of an Enqueue by a player who already has a live ticket or seat."""
    where = "queued for" if live.state == TICKET_QUEUED else "seated in"
    return FailedPreconditionError(
        f"player {player_id!r} is already {where} room {live.room_id!r} (ticket {live.ticket_id}); "
        "cancel it or finish the game first"
    )


def enqueue(
    session: Session,
    store: EventStore,
    room: Room,
    player_id: str,
    clock: Clock,
    balance_beans: int | None = None,
    seed_source: Callable[[], int] = lambda: secrets.randbits(63),
) -> tuple[Ticket, list[envelope_pb2.Envelope]]:
    """Queue `player_id` in `room`; when the queue holds four tickets, seat them at a new table.

    Refuses a player who already has a live ticket or seat (FAILED_PRECONDITION), and one whose
    balance (`balance_beans`, read from the ledger before the transaction; None = not checked) is
    below the room's entry floor (RULES.md 1.9).
    """
    # Locks the room's queue until the transaction ends, and takes the next place in it (a
    # refused enqueue rolls back, and its place with it).
    order = _take_queue_place(session, room.room_id)
    refuse_a_live_player(session, player_id)
    if balance_beans is not None and balance_beans < room.rules.entry_floor_beans:
        raise FailedPreconditionError(
            f"balance {balance_beans} beans is below room {room.room_id!r}'s entry floor of "
            f"{room.rules.entry_floor_beans} beans"
        )
    now = clock()
    ticket = Ticket(str(uuid.uuid4()), player_id, room.room_id, TICKET_QUEUED, None, None)
    session.execute(
        _INSERT_TICKET,
        {
            "ticket_id": ticket.ticket_id,
            "player_id": player_id,
            "room_id": room.room_id,
            "state": TICKET_QUEUED,
            "queued_order": order,
            "queued_at": now,
            "updated_at": now,
        },
    )
    queued = new_envelope(
        match_events_pb2.TicketQueued(ticket_id=ticket.ticket_id, player_id=player_id, room_id=room.room_id),
        stream_id=ticket.ticket_id,
        clock=clock,
    )
    appends: list[tuple[str, int, list[envelope_pb2.Envelope]]] = [(ticket.ticket_id, 0, [queued])]
    formed = _form_table(session, room, clock, seed_source, correlation_id=queued.event_id)
    if formed is not None:
        assigned, seats = formed
        appends.append((assigned.stream_id, 0, [assigned]))
        seat = seats.get(ticket.ticket_id)
        if seat is not None:
            ticket = dataclasses.replace(ticket, state=TICKET_SEATED, table_id=assigned.stream_id, seat=seat)
    # Both streams are new (random ids) and are appended together: one version check, one insert
    # of the events and one of their outbox messages, instead of one of each per stream. No
    # savepoint: every caller rolls the whole transaction back on any error (the servicer answers
    # a racing retry after the rollback).
    store.append_batch(session, appends, savepoint=False)
    return ticket, [events[0] for _, _, events in appends]


def cancel(session: Session, store: EventStore, ticket_id: str, player_id: str, clock: Clock) -> Ticket:
    """Take a queued ticket out of its room's queue. A ticket already cancelled stays cancelled."""
    ticket = load_ticket(session, ticket_id)
    if ticket is None or ticket.player_id != player_id:
        raise NotFoundError(f"no ticket {ticket_id!r} of player {player_id!r}")
    _lock_room_queue(session, ticket.room_id)
    ticket = load_ticket(session, ticket_id)
    assert ticket is not None
    if ticket.state == TICKET_CANCELLED:
        return ticket
    if ticket.state != TICKET_QUEUED:
        raise FailedPreconditionError(
            f"ticket {ticket_id} is {ticket.state} at table {ticket.table_id}; only a queued ticket can be "
            "cancelled (leave the table instead)"
        )
    session.execute(
        _SET_TICKET_STATE, {"target_ticket_id": ticket_id, "state": TICKET_CANCELLED, "updated_at": clock()}
    )
    event = new_envelope(
        match_events_pb2.TicketCancelled(ticket_id=ticket_id, player_id=player_id, reason="cancelled"),
        stream_id=ticket_id,
        clock=clock,
    )
    store.append(session, ticket_id, store.stream_version(session, ticket_id), [event])
    return dataclasses.replace(ticket, state=TICKET_CANCELLED)


def release_seat(session: Session, table_id: str, seat: int | None, clock: Clock) -> int:
    """A game ended (seat None: every seat) or a player left it: their tickets are finished."""
    parameters = {"released_table_id": table_id, "updated_at": clock()}
    if seat is None:
        result = session.execute(_RELEASE_TABLE, parameters)
    else:
        result = session.execute(_RELEASE_SEAT, {**parameters, "released_seat": seat})
    return int(getattr(result, "rowcount", 0))


def _lock_room_queue(session: Session, room_id: str) -> None:
    """Serialize a room's enqueues and cancels (so two never form overlapping tables): the room's
    queue row is created if missing (concurrent creators do not collide) and locked until the
    transaction ends."""
    _upsert_room_queue(session, room_id, increment=0)


def _take_queue_place(session: Session, room_id: str) -> int:
    """`_lock_room_queue`, and the room's next queue position (first come, first seated)."""
    return _upsert_room_queue(session, room_id, increment=1)


def _upsert_room_queue(session: Session, room_id: str, increment: int) -> int:
    """One statement: insert the room's queue row or update it (which locks it), adding
    `increment` to its last order; the new last order."""
    statement = _UPSERT_ROOM_QUEUE(session)
    return int(session.execute(statement, {"room_id": room_id, "increment": increment}).scalar_one())


def _form_table(
    session: Session,
    room: Room,
    clock: Clock,
    seed_source: Callable[[], int],
    correlation_id: str,
) -> tuple[envelope_pb2.Envelope, dict[str, int]] | None:
    """When the room's queue holds four tickets, seat them (first come, first seated) at a new
    table: its TableAssigned (for the caller to append) and each seated ticket's seat."""
    waiting = session.execute(_WAITING, {"waiting_room_id": room.room_id}).all()
    if len(waiting) < SEATS_PER_TABLE:
        return None
    table_id = str(uuid.uuid4())
    now = clock()
    session.execute(
        _SEAT_TICKET,
        [
            {"target_ticket_id": row.ticket_id, "table_id": table_id, "seat": seat, "updated_at": now}
            for seat, row in enumerate(waiting)
        ],
    )
    assigned = new_envelope(
        match_events_pb2.TableAssigned(
            table_id=table_id,
            room_id=room.room_id,
            seats=[
                match_events_pb2.SeatAssignment(seat=seat, player_id=row.player_id, ticket_id=row.ticket_id)
                for seat, row in enumerate(waiting)
            ],
            seed=seed_source(),
            room=room.to_proto(),
        ),
        stream_id=table_id,
        clock=clock,
        correlation_id=correlation_id,
    )
    return assigned, {row.ticket_id: seat for seat, row in enumerate(waiting)}


# The statements, built once: SQLAlchemy memoizes a statement's cache key on the object, so one
# built per call paid for building it and its key every time (about a third of an Enqueue's CPU).
_FIRST_ANSWER = sqlalchemy.select(idempotent_answers.c.answer, idempotent_answers.c.request_digest).where(
    idempotent_answers.c.player_id == sqlalchemy.bindparam("answer_player_id"),
    idempotent_answers.c.method == sqlalchemy.bindparam("answer_method"),
    idempotent_answers.c.idempotency_key == sqlalchemy.bindparam("answer_key"),
)
_INSERT_ANSWER = idempotent_answers.insert()
_LOAD_TICKET = sqlalchemy.select(tickets).where(
    tickets.c.ticket_id == sqlalchemy.bindparam("wanted_ticket_id")
)
_LOAD_TICKETS = PerDialect(
    lambda dialect_name: sqlalchemy.select(tickets).where(
        one_of(tickets.c.ticket_id, "wanted_ticket_ids", dialect_name)
    )
)
_LIVE_TICKET = sqlalchemy.select(
    tickets.c.ticket_id, tickets.c.state, tickets.c.room_id, tickets.c.table_id
).where(
    tickets.c.player_id == sqlalchemy.bindparam("live_player_id"), tickets.c.state.in_(LIVE_TICKET_STATES)
)
_INSERT_TICKET = tickets.insert()
_SET_TICKET_STATE = tickets.update().where(tickets.c.ticket_id == sqlalchemy.bindparam("target_ticket_id"))
_WAITING = (
    sqlalchemy.select(tickets.c.ticket_id, tickets.c.player_id)
    .where(tickets.c.room_id == sqlalchemy.bindparam("waiting_room_id"), tickets.c.state == TICKET_QUEUED)
    .order_by(tickets.c.queued_order)
    .limit(SEATS_PER_TABLE)
)
_SEAT_TICKET = (
    tickets.update()
    .where(tickets.c.ticket_id == sqlalchemy.bindparam("target_ticket_id"))
    .values(state=TICKET_SEATED)
)
_RELEASE_TABLE = (
    tickets.update()
    .where(tickets.c.table_id == sqlalchemy.bindparam("released_table_id"), tickets.c.state == TICKET_SEATED)
    .values(state=TICKET_FINISHED)
)
_RELEASE_SEAT = _RELEASE_TABLE.where(tickets.c.seat == sqlalchemy.bindparam("released_seat"))


def _build_upsert_room_queue(dialect_name: str) -> sqlalchemy.Insert:
    insert = postgresql_insert if dialect_name == "postgresql" else sqlite_insert
    statement = insert(room_queues).values(
        room_id=sqlalchemy.bindparam("room_id"), last_order=sqlalchemy.bindparam("increment")
    )
    return statement.on_conflict_do_update(
        index_elements=["room_id"],
        set_={"last_order": room_queues.c.last_order + sqlalchemy.bindparam("increment")},
    ).returning(room_queues.c.last_order)


_UPSERT_ROOM_QUEUE = compiled_once(_build_upsert_room_queue)
"""Compiled once: SQLAlchemy compiled the upsert anew for every Enqueue (no cache for ON CONFLICT)."""
