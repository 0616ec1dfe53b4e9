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
from collections.abc import Callable

import sqlalchemy
from mahjong.v1 import envelope_pb2, match_events_pb2, matchmaking_service_pb2
from mahjong_platform import idempotency
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
BalanceLookup = Callable[[str], int]
"""Balance in beans of a player (the ledger); consulted for the room's entry floor (RULES.md 1.9)."""


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
        sqlalchemy.select(idempotent_answers.c.answer, idempotent_answers.c.request_digest).where(
            idempotent_answers.c.player_id == player_id,
            idempotent_answers.c.method == method,
            idempotent_answers.c.idempotency_key == key,
        )
    ).first()
    if row is None:
        return None
    return idempotency.replay_answer(method, row.request_digest, digest, bytes(row.answer))


def remember_answer(
    session: Session, player_id: str, method: str, key: str, digest: str, answer: bytes
) -> None:
    session.execute(
        idempotent_answers.insert().values(
            player_id=player_id, method=method, idempotency_key=key, request_digest=digest, answer=answer
        )
    )


def load_ticket(session: Session, ticket_id: str) -> Ticket | None:
    row = session.execute(sqlalchemy.select(tickets).where(tickets.c.ticket_id == ticket_id)).first()
    if row is None:
        return None
    return Ticket(row.ticket_id, row.player_id, row.room_id, row.state, row.table_id, row.seat)


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
    _lock_room_queue(session, room.room_id)
    live = session.execute(
        sqlalchemy.select(tickets.c.ticket_id, tickets.c.state, tickets.c.room_id).where(
            tickets.c.player_id == player_id, tickets.c.state.in_(LIVE_TICKET_STATES)
        )
    ).first()
    if live is not None:
        where = "queued for" if live.state == TICKET_QUEUED else "seated in"
        raise FailedPreconditionError(
            f"player {player_id!r} is already {where} room {live.room_id!r} (ticket {live.ticket_id}); "
            "cancel it or finish the game first"
        )
    if balance_beans is not None and balance_beans < room.rules.entry_floor_beans:
        raise FailedPreconditionError(
            f"balance {balance_beans} beans is below room {room.room_id!r}'s entry floor of "
            f"{room.rules.entry_floor_beans} beans"
        )
    now = clock()
    order = _next_order(session, room.room_id)
    ticket = Ticket(str(uuid.uuid4()), player_id, room.room_id, TICKET_QUEUED, None, None)
    session.execute(
        tickets.insert().values(
            ticket_id=ticket.ticket_id,
            player_id=player_id,
            room_id=room.room_id,
            state=TICKET_QUEUED,
            queued_order=order,
            queued_at=now,
            updated_at=now,
        )
    )
    queued = new_envelope(
        match_events_pb2.TicketQueued(ticket_id=ticket.ticket_id, player_id=player_id, room_id=room.room_id),
        stream_id=ticket.ticket_id,
        clock=clock,
    )
    store.append(session, ticket.ticket_id, 0, [queued])
    events = [queued]
    assigned = _form_table(session, store, room, clock, seed_source, correlation_id=queued.event_id)
    if assigned is not None:
        events.append(assigned)
        ticket = load_ticket(session, ticket.ticket_id) or ticket
    return ticket, events


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
        tickets.update()
        .where(tickets.c.ticket_id == ticket_id)
        .values(state=TICKET_CANCELLED, updated_at=clock())
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
    statement = tickets.update().where(tickets.c.table_id == table_id, tickets.c.state == TICKET_SEATED)
    if seat is not None:
        statement = statement.where(tickets.c.seat == seat)
    result = session.execute(statement.values(state=TICKET_FINISHED, updated_at=clock()))
    return int(getattr(result, "rowcount", 0))


def _lock_room_queue(session: Session, room_id: str) -> None:
    """Serialize a room's enqueues (so two never form overlapping tables): the room's queue row is
    created if missing (concurrent creators do not collide) and locked until the transaction ends."""
    insert = postgresql_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    session.execute(insert(room_queues).values(room_id=room_id, last_order=0).on_conflict_do_nothing())
    session.execute(
        sqlalchemy.select(room_queues.c.last_order).where(room_queues.c.room_id == room_id).with_for_update()
    )


def _next_order(session: Session, room_id: str) -> int:
    last = session.execute(
        sqlalchemy.select(room_queues.c.last_order).where(room_queues.c.room_id == room_id)
    ).scalar_one()
    order = int(last) + 1
    session.execute(room_queues.update().where(room_queues.c.room_id == room_id).values(last_order=order))
    return order


def _form_table(
    session: Session,
    store: EventStore,
    room: Room,
    clock: Clock,
    seed_source: Callable[[], int],
    correlation_id: str,
) -> envelope_pb2.Envelope | None:
    waiting = session.execute(
        sqlalchemy.select(tickets.c.ticket_id, tickets.c.player_id)
        .where(tickets.c.room_id == room.room_id, tickets.c.state == TICKET_QUEUED)
        .order_by(tickets.c.queued_order)
        .limit(SEATS_PER_TABLE)
    ).all()
    if len(waiting) < SEATS_PER_TABLE:
        return None
    table_id = str(uuid.uuid4())
    now = clock()
    seats = []
    for seat, row in enumerate(waiting):
        seats.append(
            match_events_pb2.SeatAssignment(seat=seat, player_id=row.player_id, ticket_id=row.ticket_id)
        )
        session.execute(
            tickets.update()
            .where(tickets.c.ticket_id == row.ticket_id)
            .values(state=TICKET_SEATED, table_id=table_id, seat=seat, updated_at=now)
        )
    assigned = new_envelope(
        match_events_pb2.TableAssigned(
            table_id=table_id,
            room_id=room.room_id,
            seats=seats,
            seed=seed_source(),
            room=room.to_proto(),
        ),
        stream_id=table_id,
        clock=clock,
        correlation_id=correlation_id,
    )
    store.append(session, table_id, 0, [assigned])
    return assigned
