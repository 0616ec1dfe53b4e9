"""Benchmark: the rebuild's apply speed (``mjctl rebuild``, i.e. ``python -m mahjong_scoring
rebuild`` and ``python -m mahjong_ledger rebuild``), events per second, for scoring and the ledger.

    python -m mahjong_bench.rebuild [--games 32] [--database sqlite|postgresql|both]

What the rebuild does after it has read the topics, minus Kafka: self-play games (greedy
players, seeded) give the table events; they are replayed through `mahjong_platform.rebuild.replay` (the
live consumer's batch path, `BatchApplier`, BATCH_EVENTS per transaction) into an empty scoring
database; the settlement events scoring emitted, with the players' starting grants, are replayed
the same way into an empty ledger database. Prints events per second for each (the reading from
Kafka, about as fast again, is not included). PostgreSQL runs in a throwaway cluster.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import heapq
import os
import pathlib
import tempfile
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import sqlalchemy
from mahjong.v1 import envelope_pb2
from mahjong_ledger.rebuild import rebuild_target as ledger_target
from mahjong_platform.database import create_engine_for, create_session_factory, sqlite_url, transaction
from mahjong_platform.envelopes import new_envelope, parse_envelope
from mahjong_platform.event_store import EventStore
from mahjong_platform.rebuild import TopicRecord, rebuild_engine, replay
from mahjong_platform.schema import stored_events
from mahjong_platform.topics import Topics
from mahjong_platform.tracked_consumer import MessagePosition
from mahjong_scoring.rebuild import rebuild_target as scoring_target

PLAYERS = 16
GRANT_BEANS = 100_000
PARTITIONS = 6
GAMES_START = datetime.datetime(2026, 5, 1, tzinfo=datetime.UTC)


@dataclasses.dataclass(frozen=True)
class Result:
    """One replay's figures."""

    database: str
    projection: str
    events: int
    seconds: float
    cpu_seconds: float
    """This process's CPU time (the wall clock also counts other processes' turns on a shared
    machine; with PostgreSQL the server's CPU is not in it)."""

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds

    @property
    def events_per_cpu_second(self) -> float:
        return self.events / self.cpu_seconds


def table_events(games: int) -> list[envelope_pb2.Envelope]:
    """`games` seeded greedy Sichuan games, four of the PLAYERS each, ten minutes apart."""
    from mahjong_rules.room_rules import RoomRules
    from mahjong_table import codec
    from mahjong_table.selfplay import greedy_command
    from mahjong_table.sichuan.decide import execute, open_table
    from mahjong_table.sichuan.evolve import fold

    envelopes: list[envelope_pb2.Envelope] = []
    for index in range(games):
        table_id = f"bench-table-{index}"
        seats = [f"bench-{(index * 4 + seat) % PLAYERS}" for seat in range(4)]
        events = open_table(
            table_id, "sichuan-bench", RoomRules(coefficient=100, rake_beans=50), seats, index
        )
        state = fold(events)
        while not state.is_over:
            new, state = execute(state, greedy_command(state))
            events.extend(new)
        start = GAMES_START + datetime.timedelta(minutes=10 * index)
        for sequence, event in enumerate(events, start=1):
            occurred_at = start + datetime.timedelta(seconds=sequence)
            envelopes.append(
                new_envelope(
                    codec.to_message(event),
                    clock=_fixed_clock(occurred_at),
                    stream_id=table_id,
                    sequence=sequence,
                    event_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{table_id}/{sequence}")),
                    correlation_id=table_id,
                )
            )
    return envelopes


def _fixed_clock(moment: datetime.datetime) -> Callable[[], datetime.datetime]:
    return lambda: moment


def as_records(topic: str, envelopes: list[envelope_pb2.Envelope]) -> list[TopicRecord]:
    """The envelopes as they would be read: partitioned by stream, merged by occurrence time."""
    partitions: dict[int, list[tuple[int, TopicRecord]]] = {}
    for envelope in envelopes:
        partition = zlib.crc32(envelope.stream_id.encode()) % PARTITIONS
        items = partitions.setdefault(partition, [])
        micros = envelope.occurred_at.seconds * 1_000_000 + envelope.occurred_at.nanos // 1_000
        items.append((micros, TopicRecord(envelope, MessagePosition(topic, partition, len(items)))))
    return [record for _, record in heapq.merge(*partitions.values(), key=lambda item: item[0])]


def emitted_events(engine: sqlalchemy.Engine) -> list[envelope_pb2.Envelope]:
    """Every event the rebuilt projection appended to its event store."""
    query = sqlalchemy.select(stored_events.c.envelope).order_by(
        stored_events.c.stream_id, stored_events.c.sequence
    )
    with engine.connect() as connection:
        return [parse_envelope(bytes(row.envelope)) for row in connection.execute(query)]


def starting_grants(url: str, topics: Topics) -> list[envelope_pb2.Envelope]:
    """The players' starting grants as `TransferPosted` envelopes (what the ledger topic holds)."""
    from mahjong_ledger.repository import LedgerRepository

    target = ledger_target()
    target.migrate(url)
    engine = create_engine_for(url)
    try:
        repository = LedgerRepository(
            EventStore(topics), clock=lambda: GAMES_START - datetime.timedelta(days=1)
        )
        with transaction(create_session_factory(engine)) as session:
            for player in range(PLAYERS):
                repository.ensure_starting_grant(session, f"player:bench-{player}", GRANT_BEANS)
        return emitted_events(engine)
    finally:
        engine.dispose()


def run(database: str, urls: Callable[[str], str], games: int) -> list[Result]:
    """Replay `games` games into scoring, then their settlements into the ledger; time both."""
    topics = Topics()
    results = []
    scoring = scoring_target()
    scoring_url = urls("scoring")
    scoring.migrate(scoring_url)
    engine = rebuild_engine(scoring_url)
    try:
        records = as_records(topics.table, table_events(games))
        started, cpu_started = time.perf_counter(), time.process_time()
        statistics = replay(
            engine,
            scoring.handler(topics),
            records,
            scoring.consumer_group,
            idempotent_handler=scoring.idempotent_handler,
        )
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
        results.append(Result(database, "scoring", len(records), seconds, cpu_seconds))
        assert statistics.applied == len(records) and not statistics.failures, statistics
        settlements = emitted_events(engine)
    finally:
        engine.dispose()
    ledger = ledger_target()
    ledger_url = urls("ledger")
    records = as_records(topics.ledger, starting_grants(urls("grants"), topics)) + as_records(
        topics.settlement, settlements
    )
    ledger.migrate(ledger_url)
    engine = rebuild_engine(ledger_url)
    try:
        started, cpu_started = time.perf_counter(), time.process_time()
        statistics = replay(
            engine,
            ledger.handler(topics),
            records,
            ledger.consumer_group,
            idempotent_handler=ledger.idempotent_handler,
        )
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
        results.append(Result(database, "ledger", len(records), seconds, cpu_seconds))
        assert statistics.applied == len(records) and not statistics.failures, statistics
    finally:
        engine.dispose()
    return results


@contextmanager
def sqlite_databases() -> Iterator[Callable[[str], str]]:
    with tempfile.TemporaryDirectory() as directory:
        yield lambda name: sqlite_url(pathlib.Path(directory), name)


@contextmanager
def postgresql_databases() -> Iterator[Callable[[str], str]]:
    from mahjong_infra.postgres import PostgresCluster

    with PostgresCluster() as cluster:
        yield lambda name: cluster.create_database(f"rebuild_bench_{name}")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print events per second per projection and database."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--games", type=int, default=32)
    parser.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="sqlite")
    arguments = parser.parse_args(argv)
    assert 1 <= arguments.games <= 10_000, "--games must be 1..10,000"
    results: list[Result] = []
    if arguments.database in ("sqlite", "both"):
        with sqlite_databases() as urls:
            results += run("sqlite", urls, arguments.games)
    if arguments.database in ("postgresql", "both"):
        with postgresql_databases() as urls:
            results += run("postgresql", urls, arguments.games)
    print(f"load average {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    print(f"{'database':<12}{'rebuild':<10}{'events':>8}{'seconds':>9}{'events/s':>10}{'events/CPU s':>14}")
    for result in results:
        print(
            f"{result.database:<12}{result.projection:<10}{result.events:>8}{result.seconds:>9.2f}"
            f"{result.events_per_second:>10,.0f}{result.events_per_cpu_second:>14,.0f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
