"""Tickets and seat assignment: the matchmaking use cases, with their dependencies passed in.

Each call runs in one transaction that appends the events to the event store (and so to the outbox,
then `mahjong.match.v1`) and updates the ticket projection together: what a client is told and what
the rest of the system hears never disagree.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import secrets
import uuid
from collections.abc import Awaitable, Callable
from typing import NamedTuple

import sqlalchemy
from mahjong.v1 import envelope_pb2, match_events_pb2, matchmaking_service_pb2
from mahjong_platform import idempotency
from mahjong_platform.driver_sql import Sql, run, run_many, timestamp
from mahjong_platform.envelopes import new_envelope
from mahjong_platform.errors import FailedPreconditionError, NotFoundError
from mahjong_platform.event_store import EventStore
from sqlalchemy.orm import Session

from mahjong_matchmaking.catalog import Room
from mahjong_matchmaking.models import (
    LIVE_TICKET_STATES,
    TICKET_CANCELLED,
    TICKET_FINISHED,
    TICKET_QUEUED,
    TICKET_SEATED,
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


Database = Session | sqlalchemy.Connection
"""Where the use cases run their statements: a session in its transaction, or a connection in its
(the servicer's reads open a connection, not a session: `MatchmakingServicer._reading`)."""


def _connection(database: Database) -> sqlalchemy.Connection:
    return database.connection() if isinstance(database, Session) else database


def first_answer(database: Database, player_id: str, method: str, key: str, digest: str) -> bytes | None:
    """The stored answer of an earlier call with this idempotency key, if any; FAILED_PRECONDITION
    when that call asked something else (`mahjong_platform.idempotency`)."""
    row = run(_connection(database), _FIRST_ANSWER, (player_id, method, key)).fetchone()
    if row is None:
        return None
    answer, stored_digest = row
    return idempotency.replay_answer(method, stored_digest, digest, bytes(answer))


def remember_answer(
    database: Database, player_id: str, method: str, key: str, digest: str, answer: bytes
) -> None:
    run(_connection(database), _INSERT_ANSWER, (player_id, method, key, answer, digest))


def load_ticket(database: Database, ticket_id: str) -> Ticket | None:
    row = run(_connection(database), _LOAD_TICKET, (ticket_id,)).fetchone()
    return None if row is None else Ticket(*row)


LOAD_TICKETS_PER_QUERY = 1000


def load_tickets(database: Database, ticket_ids: list[str]) -> list[Ticket]:
    """The tickets of `ticket_ids` that exist, a query per LOAD_TICKETS_PER_QUERY of them."""
    connection = _connection(database)
    found: list[Ticket] = []
    for start in range(0, len(ticket_ids), LOAD_TICKETS_PER_QUERY):
        wanted = ticket_ids[start : start + LOAD_TICKETS_PER_QUERY]
        if connection.dialect.name == "sqlite":
            rows = run(connection, _load_tickets_sqlite(len(wanted)), wanted)
        else:  # one text for any number of tickets (`one_of`)
            rows = run(connection, _LOAD_TICKETS_POSTGRESQL, (wanted,))
        found.extend(Ticket(*row) for row in rows.fetchall())
    return found


@dataclasses.dataclass(frozen=True)
class LiveTicket:
    """A player's queued or seated ticket (a player has at most one)."""

    ticket_id: str
    state: str
    room_id: str
    table_id: str | None  # a seated ticket's table


def live_ticket(database: Database, player_id: str) -> LiveTicket | None:
    """The player's live ticket or seat, if any."""
    live = run(_connection(database), _LIVE_TICKET, (player_id,)).fetchone()
    return None if live is None else LiveTicket(*live)


def refuse_a_live_player(session: Database, player_id: str) -> None:
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
    connection = session.connection()  # the statements run on its cursor (`driver_sql`)
    order = _take_queue_place(connection, room.room_id)
    refuse_a_live_player(connection, player_id)
    if balance_beans is not None and balance_beans < room.rules.entry_floor_beans:
        raise FailedPreconditionError(
            f"balance {balance_beans} beans is below room {room.room_id!r}'s entry floor of "
            f"{room.rules.entry_floor_beans} beans"
        )
    now = clock()
    ticket = Ticket(str(uuid.uuid4()), player_id, room.room_id, TICKET_QUEUED, None, None)
    stored_now = timestamp(connection, now)
    run(
        connection,
        _INSERT_TICKET,
        (ticket.ticket_id, player_id, room.room_id, order, stored_now, stored_now),
    )
    queued = new_envelope(
        match_events_pb2.TicketQueued(ticket_id=ticket.ticket_id, player_id=player_id, room_id=room.room_id),
        stream_id=ticket.ticket_id,
        clock=clock,
    )
    appends: list[tuple[str, int, list[envelope_pb2.Envelope]]] = [(ticket.ticket_id, 0, [queued])]
    formed = _form_table(connection, room, clock, seed_source, correlation_id=queued.event_id)
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
    _lock_room_queue(session.connection(), ticket.room_id)
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
    connection = session.connection()
    updated_at = timestamp(connection, clock())
    if seat is None:
        cursor = run(connection, _RELEASE_TABLE, (updated_at, table_id))
    else:
        cursor = run(connection, _RELEASE_SEAT, (updated_at, table_id, seat))
    return int(cursor.rowcount)


def _lock_room_queue(connection: sqlalchemy.Connection, room_id: str) -> None:
    """Serialize a room's enqueues and cancels (so two never form overlapping tables): the room's
    queue row is created if missing (concurrent creators do not collide) and locked until the
    transaction ends."""
    _upsert_room_queue(connection, room_id, increment=0)


def _take_queue_place(connection: sqlalchemy.Connection, room_id: str) -> int:
    """`_lock_room_queue`, and the room's next queue position (first come, first seated)."""
    return _upsert_room_queue(connection, room_id, increment=1)


def _upsert_room_queue(connection: sqlalchemy.Connection, room_id: str, increment: int) -> int:
    """One statement: insert the room's queue row or update it (which locks it), adding
    `increment` to its last order; the new last order."""
    (last_order,) = run(connection, _UPSERT_ROOM_QUEUE, (room_id, increment, increment)).fetchone()
    return int(last_order)


def _form_table(
    connection: sqlalchemy.Connection,
    room: Room,
    clock: Clock,
    seed_source: Callable[[], int],
    correlation_id: str,
) -> tuple[envelope_pb2.Envelope, dict[str, int]] | None:
    """When the room's queue holds four tickets, seat them (first come, first seated) at a new
    table: its TableAssigned (for the caller to append) and each seated ticket's seat."""
    waiting = [_Waiting(*row) for row in run(connection, _WAITING, (room.room_id,)).fetchall()]
    if len(waiting) < SEATS_PER_TABLE:
        return None
    table_id = str(uuid.uuid4())
    now = timestamp(connection, clock())
    seats = [(table_id, seat, now, row.ticket_id) for seat, row in enumerate(waiting)]
    run_many(connection, _SEAT_TICKET, seats)
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


class _Waiting(NamedTuple):
    ticket_id: str
    player_id: str


# The hot path's statements as SQL texts run on the driver's cursor (`driver_sql`: about 10 us
# each instead of 100-170 us through `Session.execute`); the column lists are the tables' (models).
_TICKET_COLUMNS = "ticket_id, player_id, room_id, state, table_id, seat"  # `Ticket`'s fields
_FIRST_ANSWER = Sql.of(
    "SELECT answer, request_digest FROM idempotent_answers "
    "WHERE player_id = ? AND method = ? AND idempotency_key = ?"
)
_INSERT_ANSWER = Sql.of(
    "INSERT INTO idempotent_answers (player_id, method, idempotency_key, answer, request_digest) "
    "VALUES (?, ?, ?, ?, ?)"
)
_LOAD_TICKET = Sql.of(f"SELECT {_TICKET_COLUMNS} FROM tickets WHERE ticket_id = ?")
_LOAD_TICKETS_POSTGRESQL = Sql.of(f"SELECT {_TICKET_COLUMNS} FROM tickets WHERE ticket_id = ANY(?)")


@functools.lru_cache(maxsize=64)
def _load_tickets_sqlite(count: int) -> Sql:
    """SQLite has no arrays: one ``IN`` text per number of tickets (kept for the counts seen)."""
    return Sql.of(f"SELECT {_TICKET_COLUMNS} FROM tickets WHERE ticket_id IN ({', '.join('?' * count)})")


_LIVE_STATES_SQL = ", ".join(f"'{state}'" for state in LIVE_TICKET_STATES)
# The condition of the partial unique index `uq_tickets_live_player`, as written there.
_LIVE_TICKET = Sql.of(
    "SELECT ticket_id, state, room_id, table_id FROM tickets "
    f"WHERE player_id = ? AND state IN ({_LIVE_STATES_SQL})"
)
_INSERT_TICKET = Sql.of(
    "INSERT INTO tickets (ticket_id, player_id, room_id, state, queued_order, queued_at, updated_at) "
    f"VALUES (?, ?, ?, '{TICKET_QUEUED}', ?, ?, ?)"
)
_WAITING = Sql.of(
    f"SELECT ticket_id, player_id FROM tickets WHERE room_id = ? AND state = '{TICKET_QUEUED}' "
    f"ORDER BY queued_order LIMIT {SEATS_PER_TABLE}"
)
_SEAT_TICKET = Sql.of(
    f"UPDATE tickets SET state = '{TICKET_SEATED}', table_id = ?, seat = ?, updated_at = ? "
    "WHERE ticket_id = ?"
)
# Inserts the room's queue row or updates it (which locks it until the transaction ends); the
# same text on SQLite and PostgreSQL. Parameters: room, increment, increment.
_UPSERT_ROOM_QUEUE = Sql.of(
    "INSERT INTO room_queues (room_id, last_order) VALUES (?, ?) "
    "ON CONFLICT (room_id) DO UPDATE SET last_order = room_queues.last_order + ? "
    "RETURNING last_order"
)
_SET_TICKET_STATE = tickets.update().where(tickets.c.ticket_id == sqlalchemy.bindparam("target_ticket_id"))
# A game's seated tickets finished (its `GameEnded`), or one seat's (`PlayerLeft`): the seats
# consumer's one statement per event. Parameters: update time, table[, seat].
_RELEASE_TABLE = Sql.of(
    f"UPDATE tickets SET state = '{TICKET_FINISHED}', updated_at = ? "
    f"WHERE table_id = ? AND state = '{TICKET_SEATED}'"
)
_RELEASE_SEAT = Sql.of(f"{_RELEASE_TABLE.sqlite} AND seat = ?")
