"""``DeadLetterService``: every service process re-drives the dead letters of its own consumer groups.

`start_service` serves it next to the service's own gRPC service, built from the consumers the
process runs (`RedriveTarget`: the group, the handler it installed, the events it wants). A
re-drive is `mahjong_platform.dead_letters.redrive` with that handler: it reads the entry from the
dead letter topic itself (a caller names an entry, it cannot hand in an event), applies it once
in one transaction with the event's processed id and the `dead_letter_redrives` row, and a second
re-drive of the same entry applies nothing. Ops only (`METHOD_ROLES`), deny by default.

The servicer is written once, synchronously (`DeadLetterRedriver`); the asyncio servers (the table
engine) run the same calls in a worker thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from typing import Final

import grpc
import sqlalchemy
from google.protobuf import timestamp_pb2
from kafka.errors import KafkaError
from mahjong.v1 import dead_letter_service_pb2, dead_letter_service_pb2_grpc, envelope_pb2
from sqlalchemy.engine import Engine

from mahjong_platform.auth import OPS_ONLY, RoleTable, role_table
from mahjong_platform.database import create_session_factory, transaction
from mahjong_platform.dead_letters import (
    Redrive,
    RedriveError,
    RedriveHandler,
    parse_entry_id,
    read_dead_letters,
    redrive,
)
from mahjong_platform.envelopes import as_utc
from mahjong_platform.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from mahjong_platform.grpc_server import ServiceRegistration, register_service
from mahjong_platform.schema import dead_letter_redrives
from mahjong_platform.tracked_consumer import BatchHandler, Delivery, Handler, MessagePosition

SERVICE_DESCRIPTOR: Final = dead_letter_service_pb2.DESCRIPTOR.services_by_name["DeadLetterService"]
METHOD_ROLES: Final[RoleTable] = role_table(
    SERVICE_DESCRIPTOR, {"RedriveDeadLetter": OPS_ONLY, "ListRedrives": OPS_ONLY}
)
READ_TIMEOUT_SECONDS: Final = 20.0
"""How long a re-drive may take to read its entry from the dead letter topic."""

OUTCOMES: Final = {
    "applied": dead_letter_service_pb2.REDRIVE_OUTCOME_APPLIED,
    "already_applied": dead_letter_service_pb2.REDRIVE_OUTCOME_ALREADY_APPLIED,
    "not_wanted": dead_letter_service_pb2.REDRIVE_OUTCOME_NOT_WANTED,
}


@dataclasses.dataclass(frozen=True)
class RedriveTarget:
    """A consumer group of this process, as it applies one event."""

    group_id: str
    handler: RedriveHandler
    wants: Callable[[envelope_pb2.Envelope], bool] | None = None


def one_event_handler(handler: Handler | None, batch_handler: BatchHandler | None) -> RedriveHandler:
    """The group's handler for one event: its handler, or its batch handler with a batch of one
    (False when it answers that it applied nothing: its own keys found the event applied before)."""
    if handler is not None:
        return handler
    assert batch_handler is not None, "a consumer has a handler or a batch handler"

    def handle(
        session: sqlalchemy.orm.Session, envelope: envelope_pb2.Envelope, position: MessagePosition
    ) -> bool | None:
        applied = batch_handler(session, [Delivery(envelope, position)])
        return None if applied is None else bool(applied)

    return handle


class DeadLetterRedriver:
    """The service's calls, synchronous: re-drive one entry, list the re-drives."""

    def __init__(
        self,
        engine: Engine,
        bootstrap_servers: Sequence[str],
        dead_letter_topic: str,
        targets: Sequence[RedriveTarget],
        *,
        read_timeout_seconds: float = READ_TIMEOUT_SECONDS,
    ) -> None:
        self._engine = engine
        self._bootstrap_servers = list(bootstrap_servers)
        self._topic = dead_letter_topic
        self._targets = {target.group_id: target for target in targets}
        self._read_timeout_seconds = read_timeout_seconds

    def redrive(self, entry_id: str) -> dead_letter_service_pb2.RedriveDeadLetterResponse:
        try:
            place = parse_entry_id(entry_id)
        except ValueError as error:
            raise InvalidArgumentError(str(error)) from None
        try:
            entries = read_dead_letters(
                self._bootstrap_servers, self._topic, only=[place], timeout_seconds=self._read_timeout_seconds
            )
        except (TimeoutError, KafkaError) as error:
            raise UnavailableError(
                f"the dead letter topic {self._topic} cannot be read now ({type(error).__name__}); "
                "nothing changed, try again"
            ) from None
        if not entries:
            raise NotFoundError(f"no dead letter {entry_id} on {self._topic}")
        entry = entries[0]
        group = entry.dead_letter.consumer_group
        target = self._targets.get(group)
        if target is None:
            raise FailedPreconditionError(
                f"dead letter {entry_id} came from consumer group {group!r}, which this service does "
                f"not run (it runs {sorted(self._targets)}); re-drive it at the service that runs it"
            )
        try:
            result = redrive(self._engine, entry, target.handler, wants=target.wants)
        except RedriveError as error:
            raise FailedPreconditionError(f"dead letter {entry_id} not re-driven: {error}") from None
        return dead_letter_service_pb2.RedriveDeadLetterResponse(
            redrive=_message(entry_id, group, entry.event_id, result),
            newly_redriven=result.newly,
            event_type=entry.event_type,
        )

    def list_redrives(self) -> dead_letter_service_pb2.ListRedrivesResponse:
        table = dead_letter_redrives
        query = (
            sqlalchemy.select(table)
            .where(table.c.dlq_topic == self._topic, table.c.consumer_group.in_(self._targets))
            .order_by(table.c.dlq_partition, table.c.dlq_offset)
        )
        with transaction(create_session_factory(self._engine)) as session:
            rows = session.execute(query).all()
        return dead_letter_service_pb2.ListRedrivesResponse(
            consumer_groups=sorted(self._targets),
            redrives=[
                _message(
                    f"{row.dlq_partition}:{row.dlq_offset}",
                    row.consumer_group,
                    row.event_id,
                    Redrive(row.outcome, row.redriven_at, newly=False),
                )
                for row in rows
            ],
        )


def _message(entry_id: str, group: str, event_id: str, result: Redrive) -> dead_letter_service_pb2.Redrive:
    redriven_at = timestamp_pb2.Timestamp()
    moment = result.redriven_at
    redriven_at.FromDatetime(as_utc(moment))
    return dead_letter_service_pb2.Redrive(
        entry_id=entry_id,
        consumer_group=group,
        event_id=event_id,
        outcome=OUTCOMES[result.outcome],
        redriven_at=redriven_at,
    )


class DeadLetterServicer(dead_letter_service_pb2_grpc.DeadLetterServiceServicer):
    """The thread-pool servers' servicer."""

    def __init__(self, redriver: DeadLetterRedriver) -> None:
        self._redriver = redriver

    def RedriveDeadLetter(
        self, request: dead_letter_service_pb2.RedriveDeadLetterRequest, context: grpc.ServicerContext
    ) -> dead_letter_service_pb2.RedriveDeadLetterResponse:
        return self._redriver.redrive(request.entry_id)

    def ListRedrives(
        self, request: dead_letter_service_pb2.ListRedrivesRequest, context: grpc.ServicerContext
    ) -> dead_letter_service_pb2.ListRedrivesResponse:
        return self._redriver.list_redrives()


class AioDeadLetterServicer(dead_letter_service_pb2_grpc.DeadLetterServiceServicer):
    """The asyncio servers' servicer: the same calls in a worker thread, off the event loop."""

    def __init__(self, redriver: DeadLetterRedriver) -> None:
        self._redriver = redriver

    async def RedriveDeadLetter(
        self, request: dead_letter_service_pb2.RedriveDeadLetterRequest, context: grpc.aio.ServicerContext
    ) -> dead_letter_service_pb2.RedriveDeadLetterResponse:
        return await asyncio.to_thread(self._redriver.redrive, request.entry_id)

    async def ListRedrives(
        self, request: dead_letter_service_pb2.ListRedrivesRequest, context: grpc.aio.ServicerContext
    ) -> dead_letter_service_pb2.ListRedrivesResponse:
        return await asyncio.to_thread(self._redriver.list_redrives)


def registration(redriver: DeadLetterRedriver, *, asyncio_server: bool) -> ServiceRegistration:
    """The ``DeadLetterService`` registration for a thread-pool or an asyncio server."""
    servicer = AioDeadLetterServicer(redriver) if asyncio_server else DeadLetterServicer(redriver)
    return register_service(
        SERVICE_DESCRIPTOR, dead_letter_service_pb2_grpc.add_DeadLetterServiceServicer_to_server, servicer
    )
