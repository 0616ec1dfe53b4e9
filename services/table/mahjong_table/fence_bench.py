"""`python -m mahjong_table.fence_bench [--database URL]`: what the ownership fence adds to a write
transaction (README "Scale-out: replicas").

Each write transaction of a table-engine replica first reads its tables' owner-directory rows
under a share lock (`Ownership.fence`). This times, alternately, a transaction running one query
and the same transaction with the fence of four tables, and prints both medians. The database
(default: a fresh SQLite file; give an empty PostgreSQL database's URL for PostgreSQL) is migrated
first.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy
from mahjong_platform.database import create_engine_for, create_session_factory, sqlite_url, transaction
from mahjong_platform.envelopes import utc_now
from mahjong_platform.event_store import EventStore
from mahjong_platform.migrations import upgrade
from mahjong_platform.tracked_consumer import Assignment

from mahjong_table.ownership import Ownership
from mahjong_table.tables import TableEngine

TOPIC = "mahjong.match.v1"
PARTITIONS = 6
TABLES_PER_TRANSACTION = 4


def measure(database_url: str, transactions: int) -> tuple[float, float]:
    """Median seconds of (a transaction with one query, the same with the fence)."""
    upgrade(database_url, "mahjong_table:alembic", version_table="alembic_version_table")
    database = create_engine_for(database_url)
    try:
        session_factory = create_session_factory(database)
        ownership = Ownership(TOPIC, "127.0.0.1:1", session_factory, TableEngine(EventStore(), utc_now))
        ownership.assigned(
            Assignment(frozenset((TOPIC, partition) for partition in range(PARTITIONS)), {TOPIC: PARTITIONS})
        )
        table_ids = [str(uuid.uuid4()) for _ in range(64)]
        one_query = sqlalchemy.text("SELECT 1")
        plain: list[float] = []
        fenced: list[float] = []
        for index in range(transactions):
            tables = table_ids[index % 60 : index % 60 + TABLES_PER_TRANSACTION]
            started = time.perf_counter()
            with transaction(session_factory) as session:
                session.execute(one_query).all()
            plain.append(time.perf_counter() - started)
            started = time.perf_counter()
            with transaction(session_factory) as session:
                session.execute(one_query).all()
                ownership.fence(session, tables)
            fenced.append(time.perf_counter() - started)
        return statistics.median(plain), statistics.median(fenced)
    finally:
        database.dispose()


def main(arguments: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mahjong_table.fence_bench", description=__doc__)
    parser.add_argument("--database", help="an empty database's URL (default: a fresh SQLite file)")
    parser.add_argument("--transactions", type=int, default=3000)
    parsed = parser.parse_args(arguments)
    with tempfile.TemporaryDirectory() as directory:
        url = parsed.database or sqlite_url(Path(directory), "table")
        plain, fenced = measure(url, parsed.transactions)
    dialect = url.split(":", 1)[0].split("+", 1)[0]
    print(
        f"{dialect}: a write transaction with one query {plain * 1e6:.0f} us (median of "
        f"{parsed.transactions}); with the fence of {TABLES_PER_TRANSACTION} tables {fenced * 1e6:.0f} us "
        f"(+{(fenced - plain) * 1e6:.0f} us)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
