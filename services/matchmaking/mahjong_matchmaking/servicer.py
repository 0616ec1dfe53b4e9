"""MatchmakingService on `grpc.aio` (`mahjong_platform.aio_grpc_server`): validate, run the use case
in a transaction, map back.

Every call is a coroutine on the server's event loop; a WatchTicket stream waits there for its own
ticket's next change (`TicketWatchers`) instead of holding a pool thread and waking at every
Enqueue of the process. No database call runs on the loop: the reads (a ticket, an earlier answer,
a player's live ticket) run in `READ_THREADS` threads (on PostgreSQL each is a network round trip,
which on the loop held up every other call and stream of the process meanwhile), and the write
transactions (Enqueue, Cancel) in `WRITE_THREADS` threads, so that a commit's fsync or a wait for
the room's lock never holds up the loop either. The WatchTicket streams' periodic re-read (for the
changes another replica made) is one query for all the tickets watched, every WATCH_POLL_SECONDS,
not one per stream (`MatchmakingServicer._reread_watched`). The ledger's balance is awaited on the
loop (`LedgerBalances`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import grpc
import grpc.aio
import sqlalchemy
from mahjong.v1 import matchmaking_service_pb2 as messages
from mahjong.v1 import matchmaking_service_pb2_grpc
from mahjong_platform.auth import EVERY_CALLER, current_identity, role_table
from mahjong_platform.database import READ_ONLY_OPTION, SessionFactory, transaction
from mahjong_platform.envelopes import Clock, utc_now
from mahjong_platform.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_server import time_budget_seconds
from mahjong_platform.idempotency import request_digest
from sqlalchemy.exc import IntegrityError

from mahjong_matchmaking import tickets
from mahjong_matchmaking.catalog import Room
from mahjong_matchmaking.models import TICKET_QUEUED, TICKET_SEATED

# The room families the table engine plays (issue 6: Formula joined Sichuan Bloody).
PLAYABLE_VARIANTS = ("sichuan_bloody", "formula")
METHOD_ROLES = role_table(
    messages.DESCRIPTOR.services_by_name["MatchmakingService"],
    {"ListRooms": EVERY_CALLER, "Enqueue": EVERY_CALLER, "Cancel": EVERY_CALLER, "WatchTicket": EVERY_CALLER},
)
"""Who may call what (deny by default): any player; tickets are checked against their owner."""
WATCH_POLL_SECONDS = 0.25
"""How often the tickets of the open WatchTicket streams are read again, all in one query, for a
change another replica made (this process's changes wake their streams at once)."""
SEAT_RELEASE_WAIT_SECONDS = 1.0
"""How long an Enqueue of a seated player waits for the seat to be freed before it is refused."""
SEAT_RECHECK_SECONDS = 0.1
WATCH_MAX_SECONDS = 3600.0
WRITE_THREADS = 2
"""Threads running the write transactions (SQLite takes one writer at a time anyway; on
PostgreSQL two rooms' enqueues may commit at once)."""
READ_THREADS = 2
"""Threads running the read transactions (short, never waiting for a writer: WAL on SQLite)."""

_T = TypeVar("_T")
logger = logging.getLogger(__name__)


def _release(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_result(None)


def _read_only(engine: sqlalchemy.Engine) -> sqlalchemy.Engine:
    """`engine` with the options `mahjong_platform.database.read_transaction` reads with."""
    options: dict[str, object] = {READ_ONLY_OPTION: True}
    if engine.dialect.name == "postgresql":
        options.update(isolation_level="REPEATABLE READ", postgresql_readonly=True)
    return engine.execution_options(**options)


class SeatReleases:
    """What this process's seat-release consumer (a thread) notifies once it freed seats, with
    their tables, and the Enqueue calls of seated players (coroutines) wait on, each for its own
    table; the seats other replicas free are seen at the calls' periodic re-read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = 0
        self._waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]] = {}

    def generation(self) -> int:
        """Take it before reading a seat; `wait` returns at once if a release came since."""
        with self._lock:
            return self._generation

    def notify(self, table_ids: Iterable[str]) -> None:
        """Any thread: seats of `table_ids` were freed; wake the waiters of those tables (each on
        its loop)."""
        with self._lock:
            self._generation += 1
            woken = [waiter for table_id in table_ids for waiter in self._waiters.pop(table_id, ())]
        for loop, future in woken:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits there
                loop.call_soon_threadsafe(_release, future)

    async def wait(self, table_id: str, seen_generation: int, timeout_seconds: float) -> None:
        """Return once a seat of `table_id` is freed, or after `timeout_seconds`; at once when any
        release came after `seen_generation` (it may have been this table's)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        waiter = (loop, future)
        with self._lock:
            if self._generation != seen_generation:
                return
            self._waiters.setdefault(table_id, []).append(waiter)
        timer = loop.call_later(timeout_seconds, _release, future)
        try:
            await future
        finally:
            timer.cancel()
            with self._lock:
                waiters = self._waiters.get(table_id)
                if waiters is not None and waiter in waiters:
                    waiters.remove(waiter)
                    if not waiters:
                        del self._waiters[table_id]


class TicketWatchers:
    """The WatchTicket streams of this process waiting for their tickets' next change, by ticket:
    an Enqueue that seats four tickets wakes those four streams, a Cancel its ticket's, and no
    other; each is handed its ticket as the change committed it, so it need not read it again.
    Used on the server's event loop only."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Future[tickets.Ticket | None]]] = {}

    def expect(self, ticket_id: str) -> asyncio.Future[tickets.Ticket | None]:
        """A future done at the ticket's next `changed`, with the changed ticket (None when
        released otherwise: read it). Register it before reading the ticket, so a change between
        the read and the wait is not missed; give it back to `forget`."""
        future: asyncio.Future[tickets.Ticket | None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(ticket_id, set()).add(future)
        return future

    def forget(self, ticket_id: str, future: asyncio.Future[tickets.Ticket | None]) -> None:
        waiters = self._waiters.get(ticket_id)
        if waiters is not None:
            waiters.discard(future)
            if not waiters:
                del self._waiters[ticket_id]

    def changed(self, changed: Iterable[tickets.Ticket]) -> None:
        """The tickets as a committed transaction left them."""
        for ticket in changed:
            for future in self._waiters.pop(ticket.ticket_id, ()):
                if not future.done():
                    future.set_result(ticket)

    def release(self, ticket_ids: Iterable[str]) -> None:
        """Wake the streams of `ticket_ids` without a ticket: each reads its own (one that the
        periodic re-read did not find, or when that read failed)."""
        for ticket_id in ticket_ids:
            for future in self._waiters.pop(ticket_id, ()):
                _release(future)

    def ticket_ids(self) -> list[str]:
        """The tickets a stream waits for."""
        return list(self._waiters)

    def watched(self) -> int:
        """How many tickets have a stream waiting (for tests)."""
        return len(self._waiters)


class MatchmakingServicer(matchmaking_service_pb2_grpc.MatchmakingServiceServicer):
    """The asyncio servicer (see the module docstring)."""

    def __init__(
        self,
        session_factory: SessionFactory,
        rooms: dict[str, Room],
        store: EventStore,
        balance_of: tickets.BalanceLookup | None = None,
        clock: Clock = utc_now,
        watchers: TicketWatchers | None = None,
        seat_releases: SeatReleases | None = None,
        seat_release_wait_seconds: float = SEAT_RELEASE_WAIT_SECONDS,
    ) -> None:
        assert seat_release_wait_seconds >= 0, seat_release_wait_seconds
        self._session_factory = session_factory
        self._rooms = rooms
        self._store = store
        self._balance_of = balance_of
        self._clock = clock
        self.watchers = watchers or TicketWatchers()
        self.seat_releases = seat_releases or SeatReleases()
        """Notified by this process's seat-release consumer (`projection.seat_release_handler`)."""
        self.seat_release_wait_seconds = seat_release_wait_seconds
        self._writes = ThreadPoolExecutor(max_workers=WRITE_THREADS, thread_name_prefix="matchmaking-writes")
        self._reads = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="matchmaking-reads")
        self._read_engine = _read_only(session_factory.kw["bind"])
        self._reread_scheduled = False
        """Whether the periodic re-read of the watched tickets is due or running (the loop's)."""

    async def _written(self, function: Callable[..., _T], *arguments: object) -> _T:
        """`function(*arguments)` (a write transaction) in a write thread."""
        return await asyncio.get_running_loop().run_in_executor(self._writes, function, *arguments)

    async def _read(self, function: Callable[..., _T], *arguments: object) -> _T:
        """`function(*arguments)` (a read transaction) in a read thread."""
        return await asyncio.get_running_loop().run_in_executor(self._reads, function, *arguments)

    def _earlier_or_live(
        self, player_id: str, key: str, digest: str
    ) -> tuple[bytes | None, tickets.LiveTicket | None]:
        """The stored answer of the Enqueue's key, else the player's live ticket (in a read thread,
        or in the write thread of an Enqueue whose write failed)."""
        with self._reading() as connection:
            earlier = tickets.first_answer(connection, player_id, "Enqueue", key, digest)
            return earlier, None if earlier is not None else tickets.live_ticket(connection, player_id)

    # One statement each: it reads one snapshot by itself, so no BEGIN and COMMIT around it (on
    # PostgreSQL the driver opens the transaction, REPEATABLE READ READ ONLY, and the connection's
    # return to the pool rolls it back).

    def _live_ticket(self, player_id: str) -> tickets.LiveTicket | None:
        with self._read_engine.connect() as connection:
            return tickets.live_ticket(connection, player_id)

    def _load_ticket(self, ticket_id: str) -> tickets.Ticket | None:
        with self._read_engine.connect() as connection:
            return tickets.load_ticket(connection, ticket_id)

    def _load_tickets(self, ticket_ids: list[str]) -> list[tickets.Ticket]:
        """A query per LOAD_TICKETS_PER_QUERY tickets, in one snapshot."""
        with self._reading() as connection:
            return tickets.load_tickets(connection, ticket_ids)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlalchemy.Connection]:
        """A read transaction as `read_transaction` opens one (on SQLite a plain BEGIN, on
        PostgreSQL REPEATABLE READ READ ONLY: one snapshot) on a connection, without a session
        (whose set-up and commit cost more than the one or two statements a read runs), for the
        reads of more than one statement."""
        with self._read_engine.connect() as connection, connection.begin():
            yield connection

    async def ListRooms(
        self, request: messages.ListRoomsRequest, context: grpc.aio.ServicerContext
    ) -> messages.ListRoomsResponse:
        member = current_identity().member
        return messages.ListRoomsResponse(
            rooms=[
                room.to_proto(
                    caller_may_enter=room.admits(member) and room.rules.variant in PLAYABLE_VARIANTS
                )
                for room in self._rooms.values()
            ]
        )

    async def Enqueue(
        self, request: messages.EnqueueRequest, context: grpc.aio.ServicerContext
    ) -> messages.EnqueueResponse:
        identity = current_identity()
        player_id = identity.player_id
        key = request.idempotency_key
        tickets.check_idempotency_key(key)
        room = self._rooms.get(request.room_id)
        if room is None:
            raise InvalidArgumentError(
                f"unknown room {request.room_id!r}; ListRooms names the rooms: {', '.join(self._rooms)}"
            )
        if room.rules.variant not in PLAYABLE_VARIANTS:
            raise FailedPreconditionError(
                f"room {room.room_id!r} is a {room.rules.variant} room; the table engine plays only "
                f"{', '.join(PLAYABLE_VARIANTS)} rooms so far"
            )
        if not room.admits(identity.member):
            raise PermissionDeniedError(
                f"room {room.room_id!r} is open only to members of the Happy Points program "
                f"(欢乐积分计划); join the program, or choose a room ListRooms marks caller_may_enter"
            )
        digest = request_digest(request)
        releases_seen = self.seat_releases.generation()
        earlier, live = await self._read(self._earlier_or_live, player_id, key, digest)
        if earlier is not None:
            return messages.EnqueueResponse.FromString(earlier)
        if live is not None and live.state == TICKET_SEATED:
            live = await self._wait_until_unseated(player_id, live, releases_seen, context)
        if live is not None:
            # Refused here, without the ledger call and the write transaction; `enqueue` checks
            # again under the room's lock.
            raise tickets.live_player_refused(player_id, live)
        # Asked before the write transaction, so no database lock is held across a network call.
        balance_beans = None if self._balance_of is None else await self._balance_of(player_id)
        answer, seated = await self._written(self._enqueue, player_id, room, key, digest, balance_beans)
        self.watchers.changed(seated)
        return answer

    def _enqueue(
        self, player_id: str, room: Room, key: str, digest: str, balance_beans: int | None
    ) -> tuple[messages.EnqueueResponse, list[tickets.Ticket]]:
        """The Enqueue's write transaction (a write thread): its answer, and the tickets it seated.

        The earlier answer of this key was looked for just before; a retry racing its first call
        (both past that look) finds the first call's ticket live under the room's lock, or its key
        taken when it stores the answer: it rolls back, and answers the first call's answer. An
        Enqueue of the player into another room that committed first (its room's lock is not this
        one's) makes this ticket's insert fail on the player's one live ticket (a unique index):
        refused as any Enqueue of a queued or seated player, nothing written."""
        try:
            with transaction(self._session_factory) as session:
                ticket, events = tickets.enqueue(
                    session, self._store, room, player_id, self._clock, balance_beans
                )
                answer = messages.EnqueueResponse(ticket_id=ticket.ticket_id)
                tickets.remember_answer(
                    session, player_id, "Enqueue", key, digest, answer.SerializeToString()
                )
        except (FailedPreconditionError, IntegrityError) as error:
            earlier, live = self._earlier_or_live(player_id, key, digest)
            if earlier is not None:
                return messages.EnqueueResponse.FromString(earlier), []
            if isinstance(error, IntegrityError) and live is not None:
                raise tickets.live_player_refused(player_id, live) from error
            raise
        seated = [
            tickets.Ticket(
                seat.ticket_id, seat.player_id, room.room_id, TICKET_SEATED, event.stream_id, seat.seat
            )
            for event in events
            if event.WhichOneof("payload") == "table_assigned"
            for seat in event.table_assigned.seats
        ]
        return answer, seated

    async def _wait_until_unseated(
        self, player_id: str, seat: tickets.LiveTicket, generation: int, context: grpc.aio.ServicerContext
    ) -> tickets.LiveTicket | None:
        """The player's live ticket after waiting at most `seat_release_wait_seconds` (and the
        client's deadline) while they are seated: matchmaking frees a seat when it reads the
        table's GameEnded, a moment after the game ended for its players, who enqueue again at
        once. Answering that Enqueue when the seat is freed, instead of refusing it and being asked
        again every few tens of milliseconds, spares those calls and seats the player sooner; a
        player still seated after the wait is refused as before. Re-read when this process's
        consumer frees a seat at the player's table (`seat_releases`), and every
        SEAT_RECHECK_SECONDS for the seats another replica frees. `seat`: the live ticket found,
        `generation`: `seat_releases`' before the read that found it. A client that cancels the
        call ends the wait (the task is cancelled)."""
        budget = (
            time_budget_seconds(context, self.seat_release_wait_seconds)
            if self.seat_release_wait_seconds
            else 0
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        live: tickets.LiveTicket | None = seat
        while live is not None and live.state == TICKET_SEATED:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await self.seat_releases.wait(
                live.table_id or "", generation, min(remaining, SEAT_RECHECK_SECONDS)
            )
            generation = self.seat_releases.generation()
            live = await self._read(self._live_ticket, player_id)
        return live

    async def Cancel(
        self, request: messages.CancelRequest, context: grpc.aio.ServicerContext
    ) -> messages.CancelResponse:
        player_id = current_identity().player_id
        tickets.check_idempotency_key(request.idempotency_key)
        if not request.ticket_id:
            raise InvalidArgumentError("ticket_id is required")
        answer, cancelled = await self._written(self._cancel, player_id, request)
        if cancelled is not None:
            self.watchers.changed([cancelled])
        return answer

    def _cancel(
        self, player_id: str, request: messages.CancelRequest
    ) -> tuple[messages.CancelResponse, tickets.Ticket | None]:
        """The Cancel's write transaction (a write thread): its answer, and the ticket it cancelled
        (None: a retry answered the first answer)."""
        digest = request_digest(request)
        with transaction(self._session_factory) as session:
            earlier = tickets.first_answer(session, player_id, "Cancel", request.idempotency_key, digest)
            if earlier is not None:
                return messages.CancelResponse.FromString(earlier), None
            cancelled = tickets.cancel(session, self._store, request.ticket_id, player_id, self._clock)
            answer = messages.CancelResponse()
            tickets.remember_answer(
                session, player_id, "Cancel", request.idempotency_key, digest, answer.SerializeToString()
            )
        return answer, cancelled

    async def WatchTicket(
        self, request: messages.WatchTicketRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[messages.TicketUpdate]:
        player_id = current_identity().player_id
        ticket_id = request.ticket_id
        last_sent: messages.TicketUpdate | None = None
        loop = asyncio.get_running_loop()
        ends = loop.time() + WATCH_MAX_SECONDS
        ticket: tickets.Ticket | None = None  # as this process's change handed it over
        while True:
            changed = self.watchers.expect(ticket_id)
            try:
                if ticket is None:
                    ticket = await self._read(self._load_ticket, ticket_id)
                if ticket is None:
                    raise NotFoundError(f"no ticket {ticket_id!r}")
                if ticket.player_id != player_id:
                    raise PermissionDeniedError(f"ticket {ticket_id} belongs to another player")
                update = ticket.to_update()
                if update != last_sent:
                    yield update
                    last_sent = update
                remaining = ends - loop.time()
                if ticket.state != TICKET_QUEUED or remaining <= 0:
                    return
                self._schedule_reread()
                timer = loop.call_later(remaining, _release, changed)
                try:
                    ticket = await changed  # None: read it (the re-read did not find it, or failed)
                finally:
                    timer.cancel()
            finally:
                self.watchers.forget(ticket_id, changed)

    def _schedule_reread(self) -> None:
        """Make the periodic re-read of the watched tickets due in WATCH_POLL_SECONDS, unless it is
        already due or running (on the loop)."""
        if not self._reread_scheduled:
            self._reread_scheduled = True
            asyncio.get_running_loop().call_later(WATCH_POLL_SECONDS, self._reread_watched)

    def _reread_watched(self) -> None:
        """Read every watched ticket in one query (a read thread) and hand each stream its ticket;
        the streams then wait again, and the next re-read is due once they do. Replaces one read
        per stream every WATCH_POLL_SECONDS (a few hundred queued players: a few hundred reads,
        each a round trip on PostgreSQL, four times a second)."""
        ticket_ids = self.watchers.ticket_ids()
        if not ticket_ids:
            self._reread_scheduled = False
            return
        loop = asyncio.get_running_loop()
        try:
            read = loop.run_in_executor(self._reads, self._load_tickets, ticket_ids)
        except Exception:  # the read threads are gone (shutting down): never leave it "scheduled"
            logger.warning("could not start re-reading the watched tickets", exc_info=True)
            self._reread_scheduled = False
            self.watchers.release(ticket_ids)  # each stream reads its own (and fails alone)
            return
        read.add_done_callback(lambda done: self._reread_done(ticket_ids, done))

    def _reread_done(self, ticket_ids: list[str], read: asyncio.Future[list[tickets.Ticket]]) -> None:
        self._reread_scheduled = False
        if read.cancelled():
            return
        if read.exception() is not None:
            logger.warning("re-reading the watched tickets failed", exc_info=read.exception())
            self.watchers.release(ticket_ids)  # each stream reads its own (and fails alone)
        else:
            found = read.result()
            self.watchers.changed(found)
            self.watchers.release(set(ticket_ids) - {ticket.ticket_id for ticket in found})
        if self.watchers.watched():  # a stream that began to wait during the read
            self._schedule_reread()
