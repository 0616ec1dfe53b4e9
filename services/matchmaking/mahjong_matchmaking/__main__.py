"""`python -m mahjong_matchmaking`: the matchmaking service process."""

from __future__ import annotations

import weakref

from mahjong.v1 import matchmaking_service_pb2, matchmaking_service_pb2_grpc
from mahjong_platform.config import Settings, load_settings
from mahjong_platform.database import create_session_factory
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_server import ServiceRegistration, register_service
from mahjong_platform.service_runtime import ConsumerDefinition, ServiceDefinition, run_service
from mahjong_platform.structured_logging import configure_logging
from mahjong_platform.topics import Topics
from sqlalchemy import Engine

from mahjong_matchmaking.catalog import load_catalog
from mahjong_matchmaking.ledger_client import LedgerBalances
from mahjong_matchmaking.projection import releases_a_seat, seat_release_handler
from mahjong_matchmaking.servicer import METHOD_ROLES, MatchmakingServicer, TicketChanges

CONSUMER_LINGER_MS = 25
"""A poll that brought table events waits this long for more (`TrackedConsumer`'s `linger_ms`): the
table topic's events arrive a few at a time and each poll costs a fetch; a seat is freed at most
this much later (its players' Enqueue retries are refused by a read meanwhile)."""


_SEAT_RELEASES: weakref.WeakKeyDictionary[Engine, TicketChanges] = weakref.WeakKeyDictionary()


def seat_releases(engine: Engine) -> TicketChanges:
    """What the process's seat-release consumer notifies and its Enqueue calls wait on (one per
    database: the runtime gives the servicer and the consumer the same engine)."""
    return _SEAT_RELEASES.setdefault(engine, TicketChanges())


def registrations(engine: Engine, settings: Settings, topics: Topics) -> list[ServiceRegistration]:
    servicer = MatchmakingServicer(
        create_session_factory(engine),
        load_catalog(),
        EventStore(topics),
        balance_of=LedgerBalances(settings),
        seat_releases=seat_releases(engine),
    )
    return [
        register_service(
            matchmaking_service_pb2.DESCRIPTOR.services_by_name["MatchmakingService"],
            matchmaking_service_pb2_grpc.add_MatchmakingServiceServicer_to_server,
            servicer,
        )
    ]


def consumers(engine: Engine, settings: Settings, topics: Topics) -> list[ConsumerDefinition]:
    return [
        ConsumerDefinition(
            "matchmaking-seats",
            lambda topics: [topics.table],
            seat_release_handler(on_released=seat_releases(engine).notify),
            wants=releases_a_seat,
            linger_ms=CONSUMER_LINGER_MS,
        )
    ]


DEFINITION = ServiceDefinition(
    name="matchmaking",
    migrations="mahjong_matchmaking:alembic",
    registrations=registrations,
    method_roles=METHOD_ROLES,
    consumers=consumers,
)


def main() -> int:
    settings = load_settings()
    configure_logging(settings)
    return run_service(DEFINITION, settings)


if __name__ == "__main__":
    raise SystemExit(main())
