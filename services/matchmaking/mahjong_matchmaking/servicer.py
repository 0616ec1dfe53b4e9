"""MatchmakingService over gRPC: validate, call the use case in a transaction, map back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
from mahjong.v1 import matchmaking_service_pb2 as messages
from mahjong.v1 import matchmaking_service_pb2_grpc
from mahjong_platform.auth import EVERY_CALLER, current_identity, role_table
from mahjong_platform.database import SessionFactory, read_transaction, transaction
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
SEAT_RELEASE_WAIT_SECONDS = 1.0
"""How long an Enqueue of a seated player waits for the seat to be freed before it is refused."""
SEAT_RECHECK_SECONDS = 0.1
WATCH_MAX_SECONDS = 3600.0


class TicketChanges:
    """Wakes WatchTicket streams of this process when a ticket changes; other processes' changes
    are seen by the streams' periodic re-read."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._generation = 0

    def generation(self) -> int:
        with self._condition:
            return self._generation

    def notify(self) -> None:
        with self._condition:
            self._generation += 1
            self._condition.notify_all()

    def wait(self, seen_generation: int, timeout_seconds: float) -> int:
        with self._condition:
            self._condition.wait_for(lambda: self._generation != seen_generation, timeout_seconds)
            return self._generation


class MatchmakingServicer(matchmaking_service_pb2_grpc.MatchmakingServiceServicer):
    def __init__(
        self,
        session_factory: SessionFactory,
        rooms: dict[str, Room],
        store: EventStore,
        balance_of: tickets.BalanceLookup | None = None,
        clock: Clock = utc_now,
        changes: TicketChanges | None = None,
        seat_releases: TicketChanges | None = None,
        seat_release_wait_seconds: float = SEAT_RELEASE_WAIT_SECONDS,
    ) -> None:
        assert seat_release_wait_seconds >= 0, seat_release_wait_seconds
        self._session_factory = session_factory
        self._rooms = rooms
        self._store = store
        self._balance_of = balance_of
        self._clock = clock
        self.changes = changes or TicketChanges()
        self.seat_releases = seat_releases or TicketChanges()
        """Notified by this process's seat-release consumer (`projection.seat_release_handler`)."""
        self.seat_release_wait_seconds = seat_release_wait_seconds

    def ListRooms(
        self, request: messages.ListRoomsRequest, context: grpc.ServicerContext
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

    def Enqueue(
        self, request: messages.EnqueueRequest, context: grpc.ServicerContext
    ) -> messages.EnqueueResponse:
        identity = current_identity()
        player_id = identity.player_id
        tickets.check_idempotency_key(request.idempotency_key)
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
        with read_transaction(self._session_factory) as session:
            earlier = tickets.first_answer(session, player_id, "Enqueue", request.idempotency_key, digest)
            live = None if earlier is not None else tickets.live_ticket(session, player_id)
        if earlier is not None:
            return messages.EnqueueResponse.FromString(earlier)
        if live is not None and live.state == TICKET_SEATED:
            live = self._wait_until_unseated(player_id, releases_seen, context)
        if live is not None:
            # Refused here, without the ledger call and the write transaction; `enqueue` checks
            # again under the room's lock.
            raise tickets.live_player_refused(player_id, live)
        # Asked before the write transaction, so no database lock is held across a network call.
        balance_beans = None if self._balance_of is None else self._balance_of(player_id)
        with transaction(self._session_factory) as session:
            earlier = tickets.first_answer(session, player_id, "Enqueue", request.idempotency_key, digest)
            if earlier is not None:
                return messages.EnqueueResponse.FromString(earlier)
            ticket, _events = tickets.enqueue(
                session, self._store, room, player_id, self._clock, balance_beans
            )
            answer = messages.EnqueueResponse(ticket_id=ticket.ticket_id)
            tickets.remember_answer(
                session, player_id, "Enqueue", request.idempotency_key, digest, answer.SerializeToString()
            )
        self.changes.notify()
        return answer

    def _wait_until_unseated(
        self, player_id: str, generation: int, context: grpc.ServicerContext
    ) -> tickets.LiveTicket | None:
        """The player's live ticket after waiting at most `seat_release_wait_seconds` (and the
        client's deadline) while they are seated: matchmaking frees a seat when it reads the
        table's GameEnded, a moment after the game ended for its players, who enqueue again at
        once. Answering that Enqueue when the seat is freed, instead of refusing it and being asked
        again every few tens of milliseconds, spares those calls and seats the player sooner; a
        player still seated after the wait is refused as before. Re-read when this process's
        consumer frees a seat (`seat_releases`), and every SEAT_RECHECK_SECONDS for the seats
        another replica frees. `generation`: `seat_releases`' before the read that found the seat."""
        budget = (
            time_budget_seconds(context, self.seat_release_wait_seconds)
            if self.seat_release_wait_seconds
            else 0
        )
        deadline = time.monotonic() + budget
        while True:
            remaining = deadline - time.monotonic()
            if remaining > 0 and context.is_active():
                generation = self.seat_releases.wait(generation, min(remaining, SEAT_RECHECK_SECONDS))
            with read_transaction(self._session_factory) as session:
                live = tickets.live_ticket(session, player_id)
            if live is None or live.state != TICKET_SEATED or remaining <= 0 or not context.is_active():
                return live

    def Cancel(
        self, request: messages.CancelRequest, context: grpc.ServicerContext
    ) -> messages.CancelResponse:
        player_id = current_identity().player_id
        tickets.check_idempotency_key(request.idempotency_key)
        if not request.ticket_id:
            raise InvalidArgumentError("ticket_id is required")
        digest = request_digest(request)
        with transaction(self._session_factory) as session:
            earlier = tickets.first_answer(session, player_id, "Cancel", request.idempotency_key, digest)
            if earlier is not None:
                return messages.CancelResponse.FromString(earlier)
            tickets.cancel(session, self._store, request.ticket_id, player_id, self._clock)
            answer = messages.CancelResponse()
            tickets.remember_answer(
                session, player_id, "Cancel", request.idempotency_key, digest, answer.SerializeToString()
            )
        self.changes.notify()
        return answer

    def WatchTicket(
        self, request: messages.WatchTicketRequest, context: grpc.ServicerContext
    ) -> Iterator[messages.TicketUpdate]:
        player_id = current_identity().player_id
        generation = 0
        last_sent: messages.TicketUpdate | None = None
        waited_seconds = 0.0
        while context.is_active() and waited_seconds < WATCH_MAX_SECONDS:
            with read_transaction(self._session_factory) as session:
                ticket = tickets.load_ticket(session, request.ticket_id)
            if ticket is None:
                raise NotFoundError(f"no ticket {request.ticket_id!r}")
            if ticket.player_id != player_id:
                raise PermissionDeniedError(f"ticket {request.ticket_id} belongs to another player")
            update = ticket.to_update()
            if update != last_sent:
                yield update
                last_sent = update
            if ticket.state != TICKET_QUEUED:
                return
            generation = self.changes.wait(generation, WATCH_POLL_SECONDS)
            waited_seconds += WATCH_POLL_SECONDS
