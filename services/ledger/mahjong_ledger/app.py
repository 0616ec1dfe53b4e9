"""Wiring the ledger process together: migrate, then the gRPC server, the settlement consumer and
the outbox relay, each in its own thread, all stopped by one event.

`python -m mahjong_ledger` runs `LedgerProcess` from the environment; the integration tests run
the same class with their own settings, so what is tested is what is deployed.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import threading
from collections.abc import Callable
from typing import Final

from mahjong.v1 import ledger_service_pb2, ledger_service_pb2_grpc
from mahjong_platform.auth import AuthInterceptor
from mahjong_platform.config import Settings
from mahjong_platform.database import create_engine_for, create_session_factory
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_server import RunningServer, register_service, serve
from mahjong_platform.migrations import upgrade
from mahjong_platform.outbox import OutboxRelay
from mahjong_platform.topics import Topics, ensure_topics
from mahjong_platform.tracked_consumer import TrackedConsumer
from sqlalchemy.engine import Engine

from mahjong_ledger.projection import SettlementProjection
from mahjong_ledger.repository import LedgerRepository
from mahjong_ledger.servicer import ERROR_MAPPING, METHOD_ROLES, LedgerServicer
from mahjong_ledger.settings import LedgerSettings

logger = logging.getLogger(__name__)

ALEMBIC_DIRECTORY: Final = pathlib.Path(__file__).parent / "alembic"
CONSUMER_GROUP: Final = "mahjong-ledger"
RESTART_DELAY_SECONDS: Final = 2.0
THREAD_JOIN_TIMEOUT_SECONDS: Final = 30.0


def migrate(database_url: str) -> None:
    """Bring the ledger database (platform tables + ledger tables) to the newest revision."""
    upgrade(database_url, ALEMBIC_DIRECTORY)


@dataclasses.dataclass
class LedgerProcess:
    """The running ledger: server, consumer and relay. `start` returns once the server accepts calls."""

    settings: Settings
    ledger_settings: LedgerSettings
    consumer_group: str = CONSUMER_GROUP
    stop_event: threading.Event = dataclasses.field(default_factory=threading.Event)
    engine: Engine | None = None
    server: RunningServer | None = None
    _threads: list[threading.Thread] = dataclasses.field(default_factory=list)

    @property
    def topics(self) -> Topics:
        """The topics this process reads and writes (with the configured prefix)."""
        return Topics.with_prefix(self.settings.topic_prefix)

    def start(self, *, address: str | None = None) -> LedgerProcess:
        """Migrate, ensure the topics, and start the three parts."""
        database_url = self.settings.database_url("ledger")
        migrate(database_url)
        self.engine = create_engine_for(database_url)
        topics = self.topics
        bootstrap_servers = list(self.settings.kafka_bootstrap_servers)
        ensure_topics(
            bootstrap_servers,
            [topics.settlement, topics.ledger, topics.dead_letter],
            partitions=self.settings.topic_partitions,
        )
        repository = LedgerRepository(EventStore(topics=topics))
        servicer = LedgerServicer(create_session_factory(self.engine), repository, self.ledger_settings)
        self.server = serve(
            [
                register_service(
                    ledger_service_pb2.DESCRIPTOR.services_by_name["LedgerService"],
                    ledger_service_pb2_grpc.add_LedgerServiceServicer_to_server,
                    servicer,
                )
            ],
            address or self.settings.grpc_address("ledger"),
            self.settings,
            interceptors=[AuthInterceptor(self.settings.jwt_secret, METHOD_ROLES)],
            extra_error_mapping=ERROR_MAPPING,
        )
        engine = self.engine
        projection = SettlementProjection(repository)

        def run_consumer() -> None:
            with TrackedConsumer(
                engine,
                bootstrap_servers,
                self.consumer_group,
                [topics.settlement],
                projection.handle,
                topics.dead_letter,
            ) as consumer:
                consumer.run_forever(self.stop_event)

        def run_relay() -> None:
            with OutboxRelay(engine, bootstrap_servers, client_id="mahjong-ledger-outbox") as relay:
                relay.run_forever(self.stop_event)

        self._start_thread("ledger-settlement-consumer", run_consumer)
        self._start_thread("ledger-outbox-relay", run_relay)
        logger.info(
            "ledger started", extra={"grpc_port": self.server.port, "consumer_group": self.consumer_group}
        )
        return self

    def stop(self) -> None:
        """Stop the server gracefully, then the consumer and the relay; release the database."""
        self.stop_event.set()
        if self.server is not None:
            self.server.stop()
        for thread in self._threads:
            thread.join(THREAD_JOIN_TIMEOUT_SECONDS)
            if thread.is_alive():
                logger.error("thread did not stop in time", extra={"thread": thread.name})
        if self.engine is not None:
            self.engine.dispose()

    def _start_thread(self, name: str, body: Callable[[], None]) -> None:
        def keep_running() -> None:
            # A crash (broker or database down) restarts the part: its state is in the database,
            # so it resumes exactly where the last commit left it.
            while not self.stop_event.is_set():
                try:
                    body()
                except Exception:
                    logger.exception("ledger part crashed; restarting", extra={"thread": name})
                    self.stop_event.wait(RESTART_DELAY_SECONDS)

        thread = threading.Thread(target=keep_running, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)
