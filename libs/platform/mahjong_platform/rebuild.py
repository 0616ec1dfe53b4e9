"""Rebuild a service's projection from offset 0 and compare it with the live one.

ARCHITECTURE.md: "Rebuild = new empty database + replay from offset 0. It must give identical
rows." Each rebuildable service describes itself as a `RebuildTarget` (its migrations, its input
topics, its own batch handler, the tables to compare) and offers the admin command
``python -m mahjong_<service> rebuild`` (`command`); ``mjctl rebuild <service>`` runs it.

1. An EMPTY database (default: a temporary SQLite file, deleted afterwards unless ``--keep``;
   ``--database URL`` for PostgreSQL, refused unless it has no tables) is migrated with the
   service's own migration history.
2. The service's input topics are read directly from offset 0 to their end offsets of now (no
   consumer group: nothing is committed to Kafka, the live group is not disturbed), and every
   record is applied with the service's own projection handler, the way `TrackedConsumer` does it
   (`BatchApplier`): an event id already processed is skipped, a handler that raises rolls back
   only that event (the live consumer dead-lettered it; the rebuild counts it, publishes
   nothing), and the event id and the partition's next offset are stored with the rows. Events are
   committed in batches, each failing batch again one event at a time, because a rebuild that dies
   is simply started again.
3. Every projection table is digested (rows sorted by key) in both databases; the command prints
   ``identical`` (exit 0) or the first difference: table, key, column, live and rebuilt (exit 1).

Order: each partition is applied in offset order; partitions are merged by the events' occurrence
time (what each service's target says about order, and the columns it leaves out of the
comparison, is in its own ``rebuild`` module).

The platform's tables are not compared: ``stored_events``/``outbox_messages`` hold the events the
rebuilt projection emitted (never published: no relay runs, and the rebuild has no producer), with
their own ``recorded_at``/``created_at``; ``processed_events`` and ``consumer_positions`` are
bookkeeping, used only to warn when the live consumer lags the topics.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import heapq
import pathlib
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, TextIO

import sqlalchemy
from kafka import TopicPartition
from kafka.errors import KafkaError
from mahjong.v1 import envelope_pb2
from sqlalchemy.engine import Engine

from mahjong_platform.config import ServiceName, Settings, load_settings
from mahjong_platform.database import create_engine_for, create_session_factory, transaction
from mahjong_platform.envelopes import EnvelopeDecodeError, parse_envelope
from mahjong_platform.rebuild_options import add_rebuild_options
from mahjong_platform.schema import consumer_positions
from mahjong_platform.topic_reading import (
    TopicReadError,
    read_partitions_to_end,
    reading_consumer,
    topic_partitions,
)
from mahjong_platform.topics import Topics
from mahjong_platform.tracked_consumer import BatchApplier, BatchHandler, Delivery, MessagePosition

RECORDS_MAX: Final = 5_000_000
BATCH_EVENTS: Final = 500
PROGRESS_INTERVAL_SECONDS: Final = 0.25
PROGRESS_BAR_WIDTH: Final = 30
FAILURES_SHOWN_MAX: Final = 5


class RebuildError(Exception):
    """The rebuild cannot run (target database not empty, topics unreadable)."""


@dataclasses.dataclass(frozen=True)
class ComparedTable:
    """A projection table and how to compare it: its row key and the columns left out (and why)."""

    table: sqlalchemy.Table
    key: tuple[str, ...]
    excluded: frozenset[str] = frozenset()
    # A column compared only on the rows the predicate accepts (its value on the other rows
    # is shown as "-"), e.g. the running balance of the accounts every partition feeds.
    compared_only_when: tuple[str, Callable[[dict[str, Any]], bool]] | None = None

    @property
    def columns(self) -> list[str]:
        return [column.name for column in self.table.columns if column.name not in self.excluded]


@dataclasses.dataclass(frozen=True)
class RebuildTarget:
    """One rebuildable service: how to migrate it, what it reads, how it applies, what to compare."""

    service: ServiceName
    consumer_group: str
    migrate: Callable[[str], None]
    input_topics: Callable[[Topics], list[str]]
    handler: Callable[[Topics], BatchHandler]
    tables: tuple[ComparedTable, ...]
    # The input topics the live consumer group reads (its stored positions are compared with the
    # ends read, for the lag warning); None: all of them.
    consumed_topics: Callable[[Topics], list[str]] | None = None
    # The handler skips re-sent events by its own keys, as the live consumer's does
    # (`BatchApplier`'s `idempotent_handler`).
    idempotent_handler: bool = False


# --- command line: `python -m mahjong_<service> rebuild` -------------------------------------------


def command(target: RebuildTarget, argv: Sequence[str], *, prog: str) -> int:
    """The ``rebuild`` admin command of a service's own entry point (``python -m mahjong_scoring
    rebuild``): 0 identical, 1 different, 2 when the rebuild could not run."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_rebuild_options(parser)
    arguments = parser.parse_args(list(argv))
    settings = load_settings()
    live_url = arguments.live_database or settings.database_url(target.service)
    temporary_directory = (
        None if arguments.database else pathlib.Path(tempfile.mkdtemp(prefix=f"{target.service}-rebuild-"))
    )
    rebuilt_url = arguments.database or f"sqlite:///{temporary_directory}/{target.service}.sqlite3"
    try:
        report = rebuild(
            target,
            settings,
            rebuilt_url=rebuilt_url,
            live_url=live_url,
            consumer_group=arguments.live_group or target.consumer_group,
            progress=sys.stderr,
        )
    except (RebuildError, TopicReadError) as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 2
    except (KafkaError, sqlalchemy.exc.SQLAlchemyError) as error:
        # A broker or a database that does not answer, a URL that is none: the rebuild could not
        # run (Python's own exit code for the traceback, 1, would say "different").
        print(f"{prog}: could not run: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    finally:
        if temporary_directory is not None:
            if arguments.keep:
                print(f"rebuilt database kept: {rebuilt_url}", file=sys.stderr)
            else:
                shutil.rmtree(temporary_directory, ignore_errors=True)
    for line in report.lines():
        print(line)
    return 0 if report.identical else 1


# --- rebuilding ---------------------------------------------------------------------------------


@dataclasses.dataclass
class ReplayStatistics:
    """What the replay did: events applied, duplicates skipped, handler failures, time taken."""

    records: int = 0
    applied: int = 0
    duplicates: int = 0
    undecodable: int = 0
    failures: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def events_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class Difference:
    """The first row where live and rebuilt part: a column's values, or a row on one side only."""

    table: str
    key: str
    column: str
    live: str
    rebuilt: str


@dataclasses.dataclass(frozen=True)
class TableDigest:
    table: str
    live_rows: int
    rebuilt_rows: int
    live_digest: str
    rebuilt_digest: str


@dataclasses.dataclass(frozen=True)
class RebuildReport:
    """The outcome: replay statistics, per-table digests, the first difference and lag warnings."""

    service: str
    statistics: ReplayStatistics
    digests: tuple[TableDigest, ...]
    difference: Difference | None
    warnings: tuple[str, ...]

    @property
    def identical(self) -> bool:
        return self.difference is None

    def lines(self) -> list[str]:
        """The human report printed on stdout."""
        statistics = self.statistics
        lines = [
            f"replayed {statistics.records} events in {statistics.seconds:.2f} s "
            f"({statistics.events_per_second:,.0f} events/s): {statistics.applied} applied, "
            f"{statistics.duplicates} duplicates skipped, {statistics.undecodable} undecodable, "
            f"{len(statistics.failures)} failed in the handler"
        ]
        lines.extend(f"  handler failure: {failure}" for failure in statistics.failures[:FAILURES_SHOWN_MAX])
        for digest in self.digests:
            same = "same" if digest.live_digest == digest.rebuilt_digest else "DIFFERENT"
            lines.append(
                f"  {digest.table:<22} live {digest.live_rows:>7} rows {digest.live_digest[:12]}  "
                f"rebuilt {digest.rebuilt_rows:>7} rows {digest.rebuilt_digest[:12]}  {same}"
            )
        lines.extend(f"warning: {warning}" for warning in self.warnings)
        if self.difference is None:
            lines.append(f"identical: the rebuilt {self.service} projection equals the live one")
        else:
            difference = self.difference
            lines.append(
                f"different: table {difference.table}, key {difference.key}, column {difference.column}: "
                f"live {difference.live}, rebuilt {difference.rebuilt}"
            )
        return lines


def rebuild(
    target: RebuildTarget,
    settings: Settings,
    *,
    rebuilt_url: str,
    live_url: str,
    consumer_group: str,
    progress: TextIO | None = None,
) -> RebuildReport:
    """Migrate the empty database at `rebuilt_url`, replay the topics into it, compare with live."""
    if _same_database(rebuilt_url, live_url):
        raise RebuildError("the rebuild database is the live database")
    _require_empty(rebuilt_url)
    target.migrate(rebuilt_url)
    topics = Topics.with_prefix(settings.topic_prefix)
    rebuilt_engine = rebuild_engine(rebuilt_url)
    live_engine = create_engine_for(live_url)
    try:
        records, end_offsets = read_topics(
            list(settings.kafka_bootstrap_servers), target.input_topics(topics)
        )
        statistics = replay(
            rebuilt_engine,
            target.handler(topics),
            records,
            consumer_group,
            progress=progress,
            idempotent_handler=target.idempotent_handler,
        )
        consumed = (target.consumed_topics or target.input_topics)(topics)
        warnings = _lag_warnings(live_engine, consumer_group, end_offsets, *consumed)
        digests, difference = compare(live_engine, rebuilt_engine, target.tables)
    finally:
        rebuilt_engine.dispose()
        live_engine.dispose()
    return RebuildReport(target.service, statistics, digests, difference, tuple(warnings))


def _same_database(first: str, second: str) -> bool:
    return sqlalchemy.make_url(first).render_as_string() == sqlalchemy.make_url(second).render_as_string()


def _require_empty(url: str) -> None:
    engine = create_engine_for(url)
    try:
        tables = sqlalchemy.inspect(engine).get_table_names()
    finally:
        engine.dispose()
    if tables:
        raise RebuildError(
            f"the rebuild database is not empty ({len(tables)} tables, e.g. {sorted(tables)[0]}): "
            "give an empty database"
        )


def rebuild_engine(url: str) -> Engine:
    """The engine a rebuild writes with: the platform's, tuned for a throwaway database filled fast.

    - No waiting for the disk at each commit (SQLite ``synchronous=OFF``, PostgreSQL
      ``synchronous_commit=off``): a rebuild that dies is started again on an empty database.
    - PostgreSQL plans every statement with its parameters (``plan_cache_mode=force_custom_plan``).
      The tables start empty and grow by hundreds of rows per batch, faster than autovacuum
      analyzes them; a cached generic plan of a lookup such as ``event_id = ANY(:ids)`` made
      while a table was nearly empty is a sequential scan, kept as the table grows, so each
      batch cost more than the one before (50 ms for the processed-id check alone at 12,000
      events). A custom plan sees the table's current size and the list's length.
    """
    engine = create_engine_for(url)
    if engine.dialect.name == "sqlite":
        settings = ["PRAGMA synchronous=OFF"]
    else:
        settings = ["SET synchronous_commit = off", "SET plan_cache_mode = force_custom_plan"]

    @sqlalchemy.event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            for setting in settings:
                cursor.execute(setting)
        finally:
            cursor.close()
        if engine.dialect.name == "postgresql":
            dbapi_connection.commit()  # psycopg opened a transaction for the SETs: keep them

    return engine


@dataclasses.dataclass(frozen=True)
class TopicRecord:
    """One record read from Kafka, parsed (None: undecodable), with where it came from."""

    envelope: envelope_pb2.Envelope | None
    position: MessagePosition


def read_topics(
    bootstrap_servers: list[str], topic_names: Sequence[str]
) -> tuple[list[TopicRecord], dict[TopicPartition, int]]:
    """Every record of the topics up to their end offsets of now, merged across partitions by
    occurrence time (each partition stays in offset order); and those end offsets."""
    consumer = reading_consumer(bootstrap_servers)
    try:
        partitions = [
            TopicPartition(topic, partition)
            for topic in topic_names
            for partition in sorted(topic_partitions(consumer, topic))
        ]
        end_offsets: dict[TopicPartition, int] = consumer.end_offsets(partitions)
        per_partition: dict[TopicPartition, list[tuple[int, TopicRecord]]] = {
            partition: [] for partition in partitions
        }
        for record in read_partitions_to_end(consumer, partitions, RECORDS_MAX, end_offsets=end_offsets):
            partition = TopicPartition(record.topic, record.partition)
            items = per_partition[partition]
            try:
                envelope: envelope_pb2.Envelope | None = parse_envelope(record.value or b"")
            except EnvelopeDecodeError:
                envelope = None
            # Undecodable: keep its place in the partition (the time of the record before it).
            sort_key = items[-1][0] if envelope is None and items else _micros(envelope)
            items.append(
                (
                    sort_key,
                    TopicRecord(envelope, MessagePosition(record.topic, record.partition, record.offset)),
                )
            )
    finally:
        consumer.close(autocommit=False)
    merged = heapq.merge(*per_partition.values(), key=lambda item: item[0])
    return [record for _, record in merged], end_offsets


def _micros(envelope: envelope_pb2.Envelope | None) -> int:
    if envelope is None:
        return 0
    return envelope.occurred_at.seconds * 1_000_000 + envelope.occurred_at.nanos // 1_000


def replay(
    engine: Engine,
    apply: BatchHandler,
    records: Sequence[TopicRecord],
    consumer_group: str,
    *,
    progress: TextIO | None = None,
    idempotent_handler: bool = False,
) -> ReplayStatistics:
    """Apply the records in order, once per event id, through the live consumer's batch path
    (`BatchApplier`): BATCH_EVENTS per transaction, one event at a time for a batch whose handler
    failed, the failing event counted (the live consumer dead-lettered it) and nothing published."""
    statistics = ReplayStatistics(records=len(records))
    applier = BatchApplier(
        create_session_factory(engine),
        consumer_group,
        apply,
        lambda delivery, error: statistics.failures.append(_described_failure(delivery, error)),
        idempotent_handler=idempotent_handler,
    )
    bar = _ProgressBar(progress, len(records))
    started = time.perf_counter()
    for start in range(0, len(records), BATCH_EVENTS):
        batch = records[start : start + BATCH_EVENTS]
        deliveries = [
            Delivery(record.envelope, record.position) for record in batch if record.envelope is not None
        ]
        statistics.undecodable += len(batch) - len(deliveries)
        outcome = applier.apply(deliveries, [record.position for record in batch])
        statistics.applied += outcome.applied
        statistics.duplicates += outcome.duplicates
        bar.update(start + len(batch), time.perf_counter() - started)
    statistics.seconds = time.perf_counter() - started
    bar.finish(statistics.seconds)
    return statistics


def _described_failure(delivery: Delivery, error: str) -> str:
    position = delivery.position
    where = f"{position.topic}[{position.partition}]@{position.offset}"
    return f"{where} event {delivery.envelope.event_id}: {error}"


class _ProgressBar:
    """``[#####-----] done/total events, N events/s`` on stderr, redrawn at most four times a second."""

    def __init__(self, output: TextIO | None, total: int) -> None:
        self._output = output
        self._total = total
        self._last_drawn = -PROGRESS_INTERVAL_SECONDS

    def update(self, done: int, elapsed_seconds: float, *, force: bool = False) -> None:
        if self._output is None or (
            not force and elapsed_seconds - self._last_drawn < PROGRESS_INTERVAL_SECONDS
        ):
            return
        self._last_drawn = elapsed_seconds
        filled = PROGRESS_BAR_WIDTH if self._total == 0 else PROGRESS_BAR_WIDTH * done // self._total
        rate = done / elapsed_seconds if elapsed_seconds > 0 else 0.0
        bar = "#" * filled + "-" * (PROGRESS_BAR_WIDTH - filled)
        self._output.write(f"\rrebuild [{bar}] {done}/{self._total} events, {rate:,.0f} events/s ")
        self._output.flush()

    def finish(self, elapsed_seconds: float) -> None:
        self.update(self._total, elapsed_seconds, force=True)
        if self._output is not None:
            self._output.write("\n")
            self._output.flush()


def _lag_warnings(
    live_engine: Engine,
    consumer_group: str,
    end_offsets: dict[TopicPartition, int],
    *consumed_topics: str,
) -> list[str]:
    """Warn when the live consumer has not read everything the rebuild read (a difference may be lag)."""
    query = sqlalchemy.select(
        consumer_positions.c.topic, consumer_positions.c.partition, consumer_positions.c.next_offset
    ).where(consumer_positions.c.consumer_group == consumer_group)
    with transaction(create_session_factory(live_engine)) as session:
        stored = {
            TopicPartition(row.topic, row.partition): int(row.next_offset) for row in session.execute(query)
        }
    if not stored:
        return [f"the live database has no positions of consumer group {consumer_group!r} (--live-group?)"]
    behind = sum(
        max(0, end - stored.get(partition, 0))
        for partition, end in end_offsets.items()
        if partition.topic in consumed_topics
    )
    if behind == 0:
        return []
    return [
        f"the live consumer group {consumer_group!r} is {behind} records behind the topics: "
        "a difference may be lag"
    ]


# --- comparing ----------------------------------------------------------------------------------

Row = tuple[Any, ...]


def table_rows(engine: Engine, compared: ComparedTable) -> dict[Row, Row]:
    """The table's compared columns by row key, values normalized across SQLite and PostgreSQL."""
    columns = compared.columns
    key_indexes = [columns.index(name) for name in compared.key]
    query = sqlalchemy.select(*(compared.table.c[name] for name in columns))
    rows: dict[Row, Row] = {}
    with engine.connect() as connection:
        for row in connection.execute(query):
            values = tuple(_normalized(value) for value in row)
            if compared.compared_only_when is not None:
                values = _masked(values, columns, *compared.compared_only_when)
            key = tuple(values[index] for index in key_indexes)
            assert key not in rows, f"{compared.table.name}: key {key} is not unique"
            rows[key] = values
    return rows


def _masked(
    values: Row, columns: list[str], column: str, compared_when: Callable[[dict[str, Any]], bool]
) -> Row:
    if compared_when(dict(zip(columns, values, strict=True))):
        return values
    index = columns.index(column)
    return (*values[:index], "-", *values[index + 1 :])


def _normalized(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        # SQLite hands back naive UTC datetimes for timezone-aware columns, PostgreSQL aware ones.
        if value.tzinfo is not None:
            value = value.astimezone(datetime.UTC).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    return value


def digest(rows: dict[Row, Row]) -> str:
    """SHA-256 over the rows in key order: equal digests, equal tables."""
    hasher = hashlib.sha256()
    for key in sorted(rows):
        hasher.update(repr(rows[key]).encode())
        hasher.update(b"\n")
    return hasher.hexdigest()


def compare(
    live_engine: Engine, rebuilt_engine: Engine, tables: Sequence[ComparedTable]
) -> tuple[tuple[TableDigest, ...], Difference | None]:
    """Per-table digests of both databases, and the first difference (tables in the given order)."""
    digests: list[TableDigest] = []
    first: Difference | None = None
    for compared in tables:
        live = table_rows(live_engine, compared)
        rebuilt = table_rows(rebuilt_engine, compared)
        digests.append(
            TableDigest(compared.table.name, len(live), len(rebuilt), digest(live), digest(rebuilt))
        )
        if first is None:
            first = first_difference(compared, live, rebuilt)
    return tuple(digests), first


def first_difference(
    compared: ComparedTable, live: dict[Row, Row], rebuilt: dict[Row, Row]
) -> Difference | None:
    """The smallest key whose row is missing on one side or differs in a column; None if equal."""
    columns = compared.columns
    for key in sorted(live.keys() | rebuilt.keys()):
        described_key = ", ".join(f"{name}={value!r}" for name, value in zip(compared.key, key, strict=True))
        live_row, rebuilt_row = live.get(key), rebuilt.get(key)
        if live_row is None:
            return Difference(compared.table.name, described_key, "(row)", "missing", "present")
        if rebuilt_row is None:
            return Difference(compared.table.name, described_key, "(row)", "present", "missing")
        for name, live_value, rebuilt_value in zip(columns, live_row, rebuilt_row, strict=True):
            if live_value != rebuilt_value:
                return Difference(
                    compared.table.name, described_key, name, _shown(live_value), _shown(rebuilt_value)
                )
    return None


def _shown(value: Any) -> str:
    if isinstance(value, bytes):
        return f"{len(value)} bytes sha256:{hashlib.sha256(value).hexdigest()[:12]}"
    return repr(value)
