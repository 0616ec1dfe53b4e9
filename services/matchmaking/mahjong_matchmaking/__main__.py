"""`python -m mahjong_matchmaking`: the matchmaking service process."""

from __future__ import annotations

import weakref
from collections.abc import Callable

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
from mahjong_matchmaking.servicer import METHOD_ROLES, MatchmakingServicer, SeatReleases
from mahjong_matchmaking.table_topic_backlog import TableTopicBacklog

SEATS_GROUP = "matchmaking-seats"
"""The seat-release consumer group (its positions and processed event ids): it read
`mahjong.table.v1` before `mahjong.seats.v1` existed; the same group on both keeps one set of
processed event ids (`table_topic_backlog`)."""
SEATS_KAFKA_GROUP = "matchmaking-seats-topic"
"""The Kafka group of the seats topic's consumer: not `SEATS_GROUP`, which the table topic's
consumers of an older matchmaking still join while a deployment upgrades (kafka-python's group
leader assigns only the topics it subscribed to itself)."""


_SEAT_RELEASES: weakref.WeakKeyDictionary[Engine, SeatReleases] = weakref.WeakKeyDictionary()


def seat_releases(engine: Engine) -> SeatReleases:
    """What the process's seat-release consumer notifies and its Enqueue calls wait on (one per
    database: the runtime gives the servicer and the consumer the same engine)."""
    return _SEAT_RELEASES.setdefault(engine, SeatReleases())


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
    """The seat releases, from the seats topic alone: ~2 events a game where the table topic has
    ~250 (a poll applies what it brought at once: a player waits for the release to enqueue). The
    handler is idempotent by its own keys (a release frees its table's seated tickets, and a table
    id is never seated again: applied twice, the second changes nothing), so no processed ids are
    read or written (`table_topic_backlog`: the consumers of its group never race on them)."""
    return [
        ConsumerDefinition(
            SEATS_GROUP,
            lambda topics: [topics.seats],
            seat_release_handler(on_released=seat_releases(engine).notify),
            wants=releases_a_seat,
            kafka_group_id=SEATS_KAFKA_GROUP,
            idempotent_handler=True,
        )
    ]


def extra_workers(
    engine: Engine, settings: Settings, topics: Topics
) -> list[tuple[str, Callable[[], TableTopicBacklog]]]:
    """The releases a deployment that read the table topic may still have there, applied once."""
    handler = seat_release_handler(on_released=seat_releases(engine).notify)

    def backlog() -> TableTopicBacklog:
        bootstrap_servers = list(settings.kafka_bootstrap_servers)
        return TableTopicBacklog(
            engine, bootstrap_servers, topics, SEATS_GROUP, handler, wants=releases_a_seat
        )

    return [("table-topic-backlog", backlog)]


DEFINITION = ServiceDefinition(
    name="matchmaking",
    migrations="mahjong_matchmaking:alembic",
    registrations=registrations,
    method_roles=METHOD_ROLES,
    consumers=consumers,
    extra_workers=extra_workers,
    asyncio_server=True,
)


def main() -> int:
    settings = load_settings()
    configure_logging(settings)
    return run_service(DEFINITION, settings)


if __name__ == "__main__":
    raise SystemExit(main())
