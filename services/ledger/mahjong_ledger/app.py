"""The ledger process: the shared service runtime (`mahjong_platform.service_runtime`) with the
ledger's migrations, gRPC service, settlement consumer and outbox relay.

`python -m mahjong_ledger` runs `LedgerProcess` from the environment; the integration tests run
the same class with their own settings, so what is tested is what is deployed.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
from typing import Final

from mahjong.v1 import ledger_service_pb2, ledger_service_pb2_grpc
from mahjong_platform.aio_grpc_server import AioRunningServer
from mahjong_platform.config import Settings
from mahjong_platform.database import create_session_factory
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_server import RunningServer, ServiceRegistration, register_service
from mahjong_platform.service_runtime import (
    ConsumerDefinition,
    RunningService,
    ServiceDefinition,
    start_service,
)
from mahjong_platform.service_runtime import migrate as migrate_service
from mahjong_platform.topics import Topics
from sqlalchemy.engine import Engine

from mahjong_ledger.metrics import instrument
from mahjong_ledger.projection import IDEMPOTENT_HANDLER, SettlementProjection
from mahjong_ledger.repository import LedgerRepository
from mahjong_ledger.scoring_client import ScoringServiceInstructions
from mahjong_ledger.servicer import ERROR_MAPPING, METHOD_ROLES, LedgerServicer
from mahjong_ledger.settings import LedgerSettings

logger = logging.getLogger(__name__)

ALEMBIC_DIRECTORY: Final = pathlib.Path(__file__).parent / "alembic"
CONSUMER_GROUP: Final = "mahjong-ledger"


def definition(ledger_settings: LedgerSettings, consumer_group: str = CONSUMER_GROUP) -> ServiceDefinition:
    """The ledger as a `ServiceDefinition` for the shared runtime."""

    def registrations(engine: Engine, settings: Settings, topics: Topics) -> list[ServiceRegistration]:
        repository = LedgerRepository(EventStore(topics=topics))
        scoring = ScoringServiceInstructions.from_settings(settings)
        servicer = LedgerServicer(create_session_factory(engine), repository, ledger_settings, scoring)
        return [
            register_service(
                ledger_service_pb2.DESCRIPTOR.services_by_name["LedgerService"],
                ledger_service_pb2_grpc.add_LedgerServiceServicer_to_server,
                servicer,
            )
        ]

    def consumers(engine: Engine, settings: Settings, topics: Topics) -> list[ConsumerDefinition]:
        projection = SettlementProjection(LedgerRepository(EventStore(topics=topics)))
        return [
            ConsumerDefinition(
                consumer_group,
                lambda topics: [topics.settlement],
                None,
                batch_handler=projection.handle_batch,
                idempotent_handler=IDEMPOTENT_HANDLER,
            )
        ]

    return ServiceDefinition(
        name="ledger",
        migrations=str(ALEMBIC_DIRECTORY),
        registrations=registrations,
        method_roles=METHOD_ROLES,
        consumers=consumers,
        error_mapping=ERROR_MAPPING,
        instrument=instrument,
    )


def migrate(database_url: str) -> None:
    """Bring the ledger database (platform tables + ledger tables) to the newest revision."""
    migrate_service(definition(LedgerSettings()), database_url)


@dataclasses.dataclass
class LedgerProcess:
    """The running ledger: server, consumer and relay. `start` returns once the server accepts calls."""

    settings: Settings
    ledger_settings: LedgerSettings
    consumer_group: str = CONSUMER_GROUP
    running: RunningService | None = None

    @property
    def server(self) -> RunningServer | AioRunningServer | None:
        return None if self.running is None else self.running.server

    def start(self, *, address: str | None = None) -> LedgerProcess:
        """Migrate, ensure the topics, and start the server, the consumer and the relay."""
        self.running = start_service(
            definition(self.ledger_settings, self.consumer_group), self.settings, address=address
        )
        logger.info(
            "ledger started", extra={"grpc_port": self.running.port, "consumer_group": self.consumer_group}
        )
        return self

    def stop(self) -> None:
        """Stop the server gracefully, then the consumer and the relay; release the database."""
        if self.running is not None:
            self.running.stop()
