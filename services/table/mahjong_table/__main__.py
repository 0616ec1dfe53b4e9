"""`python -m mahjong_table`: the table engine process."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

from mahjong.v1 import table_service_pb2, table_service_pb2_grpc
from mahjong_platform.config import Settings, load_settings
from mahjong_platform.database import create_session_factory
from mahjong_platform.envelopes import utc_now
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_server import ServiceRegistration, register_service
from mahjong_platform.metrics import UNSCRAPED, ServiceMetrics, metrics_for_engine
from mahjong_platform.service_runtime import ConsumerDefinition, ServiceDefinition, Worker, run_service
from mahjong_platform.structured_logging import configure_logging
from mahjong_platform.topics import Topics
from sqlalchemy import Engine

from mahjong_table.deadlines import DeadlineWorker
from mahjong_table.metrics import instrument
from mahjong_table.ownership import DirectoryWorker, Ownership, advertised_address
from mahjong_table.projection import is_table_assignment, table_openings
from mahjong_table.routing import OwnerRoutingInterceptor
from mahjong_table.servicer import METHOD_ROLES, TABLE_ERROR_MAPPING, Presence, TableServicer
from mahjong_table.tables import TableEngine


@dataclasses.dataclass
class TableProcess:
    """The objects one table-engine process shares between its gRPC server and its workers: the
    tables it owns (in memory), who is connected, and which partitions are its (`ownership`)."""

    engine: TableEngine
    presence: Presence
    settings: Settings | None = None  # for the advertised address; None: the environment's
    _ownership: Ownership | None = None
    _metrics: ServiceMetrics = UNSCRAPED

    def ownership(self, database: Engine, topics: Topics) -> Ownership:
        """One per process, made at the first use (every piece gets the same database engine)."""
        if self._ownership is None:
            address = advertised_address(self.settings or load_settings())
            self._metrics = metrics_for_engine(database)
            self._ownership = Ownership(
                topics.match,
                address,
                create_session_factory(database),
                self.engine,
                # Outside a service process (an embedded server) nobody scrapes: no gauge of its own.
                metrics=None if self._metrics is UNSCRAPED else self._metrics,
                presence=self.presence,
            )
        return self._ownership

    def registrations(
        self, database: Engine, settings: Settings, topics: Topics
    ) -> list[ServiceRegistration]:
        self.ownership(database, topics)  # before the server: its interceptor routes by it
        servicer = TableServicer(create_session_factory(database), self.engine, self.presence)
        return [
            register_service(
                table_service_pb2.DESCRIPTOR.services_by_name["TableService"],
                table_service_pb2_grpc.add_TableServiceServicer_to_server,
                servicer,
            )
        ]

    def consumers(self, database: Engine, settings: Settings, topics: Topics) -> list[ConsumerDefinition]:
        return [
            ConsumerDefinition(
                "table-openings",
                lambda topics: [topics.match],
                None,
                wants=is_table_assignment,
                batch_handler=table_openings(self.engine),
                on_assignment=self.ownership(database, topics).assigned,
                idempotent_handler=True,
            )
        ]

    def workers(
        self, database: Engine, settings: Settings, topics: Topics
    ) -> list[tuple[str, Callable[[], Worker]]]:
        session_factory = create_session_factory(database)
        ownership = self.ownership(database, topics)
        return [
            (
                "deadlines",
                lambda: DeadlineWorker(session_factory, self.engine, self.presence, utc_now, ownership),
            ),
            ("owner-directory", lambda: DirectoryWorker(ownership)),
        ]

    def interceptors(self) -> list[OwnerRoutingInterceptor]:
        assert self._ownership is not None, "the registrations make the ownership first"
        return [OwnerRoutingInterceptor(self._ownership, self._metrics)]

    def serving(self) -> threading.Event:
        """Set at the first partition assignment: before it the replica serves no table and
        forwards none (every call would be UNAVAILABLE), so its health says NOT_SERVING."""
        assert self._ownership is not None, "the registrations make the ownership first"
        return self._ownership.assigned_once


def definition(settings: Settings) -> ServiceDefinition:
    process = TableProcess(
        TableEngine(EventStore(Topics.with_prefix(settings.topic_prefix)), utc_now), Presence(), settings
    )
    return ServiceDefinition(
        name="table",
        migrations="mahjong_table:alembic",
        registrations=process.registrations,
        consumers=process.consumers,
        extra_workers=process.workers,
        method_roles=METHOD_ROLES,
        error_mapping=TABLE_ERROR_MAPPING,
        asyncio_server=True,
        instrument=instrument,
        extra_interceptors=process.interceptors,
        serving_when=process.serving,
    )


def main() -> int:
    settings = load_settings()
    configure_logging(settings)
    return run_service(definition(settings), settings)


if __name__ == "__main__":
    raise SystemExit(main())
