"""Benchmark: ledger postings per second on SQLite and on PostgreSQL, by batch size.

    python -m mahjong_ledger.bench [--instructions 2000] [--database sqlite|postgresql|both]
                                   [--batch-sizes 1,10,100]

The settlement instructions go through the tracked consumer's transaction logic (`BatchApplier`:
the ledger's batch handler, which skips a posted instruction id itself, and the positions, one
transaction per batch), minus Kafka: lock the accounts, split, insert the transfers and their
postings, update the balances, append ``TransferPosted`` to the event store and the outbox.
Batch size 1 is one event per transaction (what a quiet consumer does); a busy consumer's poll
returns up to 100. The mix is a game's: kongs (3 payees), wins (1 payee), shortfalls and the
rake, so about 2.7 postings per instruction. PostgreSQL runs in a throwaway cluster
(`mahjong_infra.postgres`) on loopback. Prints a table; figures are for the machine it runs on,
not a promise.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import sqlalchemy
from mahjong.v1 import envelope_pb2
from mahjong_platform.database import (
    SessionFactory,
    create_engine_for,
    create_session_factory,
    sqlite_url,
    transaction,
)
from mahjong_platform.event_store import EventStore
from mahjong_platform.topics import Topics
from mahjong_platform.tracked_consumer import BATCH_EVENTS_MAX, BatchApplier, Delivery, MessagePosition

from mahjong_ledger.app import migrate
from mahjong_ledger.domain import DepositOrder
from mahjong_ledger.models import ledger_postings
from mahjong_ledger.projection import IDEMPOTENT_HANDLER, SettlementProjection
from mahjong_ledger.reconcile import reconcile
from mahjong_ledger.repository import LedgerRepository
from mahjong_ledger.testing import instruction_envelope, payee

PLAYERS_PER_TABLE = 4
TABLES = 50
STARTING_BEANS = 50_000


@dataclasses.dataclass(frozen=True)
class Result:
    """One backend's figures."""

    backend: str
    batch_size: int
    instructions: int
    postings: int
    seconds: float
    reconcile_seconds: float
    cpu_seconds: float
    """This process's CPU time for the postings (on a shared machine the wall clock also counts
    other processes' turns; with PostgreSQL the server's CPU is not in it)."""

    @property
    def postings_per_second(self) -> float:
        return self.postings / self.seconds

    @property
    def postings_per_cpu_second(self) -> float:
        return self.postings / self.cpu_seconds

    @property
    def instructions_per_second(self) -> float:
        return self.instructions / self.seconds


def instructions(count: int) -> list[envelope_pb2.Envelope]:
    """A deterministic stream of game-like instructions over TABLES tables of four players."""
    envelopes = []
    for index in range(count):
        table = index % TABLES
        seats = [f"player:t{table}s{seat}" for seat in range(PLAYERS_PER_TABLE)]
        payer = seats[index % PLAYERS_PER_TABLE]
        others = [seat for seat in seats if seat != payer]
        kind = index % 4
        if kind == 0:
            payees, reason = [payee(other, 200) for other in others], "exposed_kong"
        elif kind == 1:
            payees, reason = [payee(others[0], 3_600)], "win"
        elif kind == 2:
            payees, reason = (
                [payee(other, 9_000 + 1_000 * number) for number, other in enumerate(others)],
                "win",
            )
        else:
            payees, reason = [payee("house:rake", 400)], "rake"
        envelopes.append(
            instruction_envelope(
                f"bench-{index}",
                payer,
                payees,
                table_id=f"bench-table-{table}",
                reason=reason,
                sequence=index + 1,
            )
        )
    return envelopes


def run(backend: str, database_url: str, count: int, batch_size: int) -> Result:
    """Migrate, fund the players, post `count` instructions `batch_size` per transaction, time it."""
    migrate(database_url)
    engine = create_engine_for(database_url)
    try:
        session_factory = create_session_factory(engine)
        repository = LedgerRepository(EventStore(topics=Topics()))
        with transaction(session_factory) as session:
            for table in range(TABLES):
                for seat in range(PLAYERS_PER_TABLE):
                    account = f"player:t{table}s{seat}"
                    repository.deposit(
                        session, DepositOrder(account, STARTING_BEANS, f"bench-fund:{account}")
                    )
        postings_before = _postings(session_factory)
        applier = BatchApplier(
            session_factory,
            "ledger-bench",
            SettlementProjection(repository).handle_batch,
            _no_failures,
            idempotent_handler=IDEMPOTENT_HANDLER,
        )
        deliveries = [
            Delivery(envelope, MessagePosition("bench", 0, offset))
            for offset, envelope in enumerate(instructions(count))
        ]
        started, cpu_started = time.perf_counter(), time.process_time()
        for start in range(0, len(deliveries), batch_size):
            batch = deliveries[start : start + batch_size]
            applier.apply(batch, [delivery.position for delivery in batch])
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
        postings = _postings(session_factory) - postings_before
        with transaction(session_factory) as session:
            reconcile_started = time.perf_counter()
            report = reconcile(session)
            reconcile_seconds = time.perf_counter() - reconcile_started
        assert report.ok, report.findings
        return Result(backend, batch_size, count, postings, seconds, reconcile_seconds, cpu_seconds)
    finally:
        engine.dispose()


def _postings(session_factory: SessionFactory) -> int:
    with transaction(session_factory) as session:
        query = sqlalchemy.select(sqlalchemy.func.count()).select_from(ledger_postings)
        return int(session.execute(query).scalar_one())


def _no_failures(delivery: Delivery, error: str) -> None:
    raise AssertionError(f"instruction {delivery.envelope.event_id} failed: {error}")


@contextmanager
def postgresql_cluster() -> Iterator[Callable[[str], str]]:
    """`create(name) -> url` in a throwaway PostgreSQL cluster, stopped and deleted afterwards."""
    from mahjong_infra.postgres import PostgresCluster

    with PostgresCluster() as cluster:
        yield cluster.create_database


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a table of postings per second."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--instructions", type=int, default=2_000)
    parser.add_argument(
        "--database", "--backend", dest="database", choices=["sqlite", "postgresql", "both"], default="both"
    )
    parser.add_argument("--batch-sizes", default="1,10,100", help="comma-separated events per transaction")
    arguments = parser.parse_args(argv)
    assert 1 <= arguments.instructions <= 1_000_000, "--instructions must be 1..1,000,000"
    batch_sizes = [int(size) for size in arguments.batch_sizes.split(",")]
    assert all(1 <= size <= BATCH_EVENTS_MAX for size in batch_sizes), batch_sizes
    results = []
    if arguments.database in ("sqlite", "both"):
        for batch_size in batch_sizes:
            with tempfile.TemporaryDirectory() as directory:
                url = sqlite_url(pathlib.Path(directory), "ledger")
                results.append(run("sqlite", url, arguments.instructions, batch_size))
    if arguments.database in ("postgresql", "both"):
        with postgresql_cluster() as create_database:
            for batch_size in batch_sizes:
                url = create_database(f"ledger_bench_{batch_size}")
                results.append(run("postgresql", url, arguments.instructions, batch_size))
    print(f"load average {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    print(
        f"{'database':<12}{'batch':>6}{'instructions':>14}{'postings':>10}{'seconds':>9}"
        f"{'instr/s':>10}{'postings/s':>12}{'postings/CPU s':>16}{'reconcile s':>13}"
    )
    for result in results:
        print(
            f"{result.backend:<12}{result.batch_size:>6}{result.instructions:>14}{result.postings:>10}"
            f"{result.seconds:>9.2f}{result.instructions_per_second:>10.0f}"
            f"{result.postings_per_second:>12.0f}{result.postings_per_cpu_second:>16.0f}"
            f"{result.reconcile_seconds:>13.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
