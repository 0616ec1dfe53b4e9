"""Which table-engine replica owns which tables (README "Scale-out: replicas").

A table belongs to the partition of ``mahjong.match.v1`` its ``TableAssigned`` is published to: the
message key is the table id, so Kafka's default partitioner (murmur2 of the key, `partition_of`)
names it for every table, opened or not. The table engine's consumer group gives each replica some
of those partitions; the replica **owns** their tables: it opens them (its consumer reads their
assignments), keeps them in memory, serves their calls and fires their timers (`deadlines`).

The **owner directory** (``table_partition_owners`` in the table database every replica shares)
names each partition's owner: its advertised address and an epoch raised at every change of owner.
A replica writes it when the group assigns it partitions (`Ownership.assigned`, on the consumer's
own thread, never on kafka-python's network thread: README "Reliability") and every replica reads
it once a second (`DirectoryWorker`), so a call that reaches a replica that does not own its table
is forwarded to the one that does (`routing`).

Taking over a partition: a replica that finds its own epoch still in the directory owned it all
along and keeps its tables in memory; otherwise another replica may have written them meanwhile, so
it drops what it cached of them, reloads their live tables from the event store and tells their
watchers. Their deadlines are in the status rows, so the timers fire again from the recorded
deadlines (one that has passed by the takeover, or would pass within TAKEOVER_GRACE of it, is
moved to TAKEOVER_GRACE after it, so a player is not timed out for the outage). Losing one: it
stops serving the partition's tables at once (`TableEngine.check_owned`: a command is refused and
an open stream ends, at its next look at the table, with UNAVAILABLE), so each client retries or
reconnects and is forwarded to the new owner.

One writer per table: Kafka may give a partition to a new member before the old one hears of it.
Every write transaction first checks, under a share lock, that the directory still names its
process at the epoch it claimed (`Ownership.fence`), and a claim takes the rows for update: once
a takeover's claim commits, the old owner's writes fail (UNAVAILABLE) and the new owner, which
loads the tables after its claim, has seen every write before it. The expected-version append
(``WrongExpectedVersionError``, in the group commit's batches too) stays the last guard.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import logging
import socket
import threading
import uuid
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

import sqlalchemy
from kafka.partitioner.default import murmur2
from mahjong_platform.config import Settings
from mahjong_platform.database import SessionFactory, read_transaction, transaction
from mahjong_platform.envelopes import Clock, utc_now
from mahjong_platform.event_store import SqlCondition
from mahjong_platform.metrics import ServiceMetrics
from mahjong_platform.tracked_consumer import Assignment
from prometheus_client import Counter, Gauge
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from mahjong_table.models import table_partition_owners, table_status
from mahjong_table.tables import TableEngine, TableMovedError

if TYPE_CHECKING:
    from mahjong_table.servicer import Presence

logger = logging.getLogger(__name__)

DIRECTORY_REFRESH_SECONDS: Final = 1.0
TAKEOVER_GRACE: Final = datetime.timedelta(seconds=5)
"""At least this long, from a takeover, before the new owner acts for a player (`deadlines`)."""
_WILDCARD_HOSTS: Final = frozenset({"0.0.0.0", "[::]", "::", ""})


@functools.lru_cache(maxsize=65_536)
def partition_of(table_id: str, partitions: int) -> int:
    """The partition Kafka's default partitioner (Java's and kafka-python's) gives the key
    `table_id` on a topic of `partitions` partitions."""
    hashed: int = murmur2(table_id.encode())
    return (hashed & 0x7FFFFFFF) % partitions


def advertised_address(settings: Settings) -> str:
    """Where the other replicas reach this one: ``MAHJONG_TABLE_ADVERTISED_ADDRESS``, else the listen
    address, or this host's address when it listens on every interface (a container's own IP)."""
    if settings.table_advertised_address:
        return settings.table_advertised_address
    address = settings.grpc_address("table")
    host, _, port = address.rpartition(":")
    if host not in _WILDCARD_HOSTS:
        return address
    hostname = socket.gethostname()
    try:
        return f"{socket.gethostbyname(hostname)}:{port}"
    except OSError:
        return f"{hostname}:{port}"


@dataclasses.dataclass(frozen=True, slots=True)
class Owner:
    """A partition's owner as the directory names it."""

    address: str
    epoch: int


class _Local:
    def __repr__(self) -> str:
        return "LOCAL"


LOCAL: Final = _Local()
"""`Ownership.route`: this replica owns the table."""
Route = _Local | str | None
"""LOCAL, the owner's address to forward to, or None: no replica serves the table right now."""


class Ownership:
    """This replica's partitions, the epochs it claimed them at, and the directory as last read.

    Read on every call (`route`) without a lock: the owned set, the partition count and the
    directory are immutable snapshots replaced whole on each change."""

    def __init__(
        self,
        topic: str,
        address: str,
        session_factory: SessionFactory,
        engine: TableEngine,
        *,
        instance_id: str | None = None,
        clock: Clock = utc_now,
        metrics: ServiceMetrics | None = None,
        presence: Presence | None = None,
    ) -> None:
        self.topic = topic
        self.address = address
        self.instance_id = instance_id or uuid.uuid4().hex
        self._session_factory = session_factory
        self._engine = engine
        self._clock = clock
        self._presence = presence
        self._partitions = 0  # the topic's partition count; 0 until the first assignment
        self._owned: frozenset[int] = frozenset()
        self._directory: Mapping[int, Owner] = MappingProxyType({})
        self._claimed: dict[int, int] = {}  # partition -> the epoch this process claimed it at
        self._claims_lock = threading.Lock()  # one assignment at a time (a replaced consumer's too)
        # Set by the first assignment: from then on this replica knows every table's partition and
        # serves or forwards its calls (the process's health says SERVING from then on).
        self.assigned_once = threading.Event()
        self._taken_over: Counter | None = None
        if metrics is not None:  # the process's one ownership (tests make several, unscraped)
            Gauge(
                "mahjong_table_owned_partitions",
                "Partitions of the match topic this table-engine replica owns (serves the tables of).",
                registry=metrics.registry,
            ).set_function(lambda: len(self._owned))
            self._taken_over = metrics.counter(
                "mahjong_table_partitions_taken_over",
                "Partitions this replica took over (another may have written their tables: reloaded).",
            )

    # ------------------------------------------------------------------ read on every call

    def partition(self, table_id: str) -> int | None:
        """The table's partition, or None before the partition count is known."""
        return partition_of(table_id, self._partitions) if self._partitions else None

    def owned(self) -> frozenset[int]:
        return self._owned

    def owns(self, table_id: str) -> bool:
        partition = self.partition(table_id)
        return partition is not None and partition in self._owned

    def route(self, table_id: str) -> Route:
        """Where a call about `table_id` is served: here (LOCAL), at the owner's address, or nowhere
        right now (None: the partition is between owners, or its owner is this address's previous
        process)."""
        partition = self.partition(table_id)
        if partition is None:
            return None
        if partition in self._owned:
            return LOCAL
        owner = self._directory.get(partition)
        if owner is None or owner.address == self.address:
            return None
        return owner.address

    def directory(self) -> Mapping[int, Owner]:
        """Partition -> owner, as this replica last read it (its own partitions included)."""
        return self._directory

    # ------------------------------------------------------------------ the consumer's assignment

    def assigned(self, assignment: Assignment) -> None:
        """The consumer group's new assignment (`TrackedConsumer`'s ``on_assignment``, on the
        consumer's thread): claim the partitions in the directory, reload those another replica
        may have written, stop serving the ones taken away."""
        partitions = frozenset(p for topic, p in assignment.partitions if topic == self.topic)
        count = assignment.partition_counts.get(self.topic, 0)
        with self._claims_lock:
            with transaction(self._session_factory) as session:
                epochs, continuous = self._claim(session, partitions)
                reloaded = partitions - continuous
                self._grant_takeover_grace(session, reloaded)
            if reloaded and count:
                # Before serving them: nothing cached of a partition someone else wrote is trusted
                # (its states, the deadlines just moved), nor what was seen of its seats' streams
                # (they were at the other replica).
                def taken_over(table_id: str) -> bool:
                    return partition_of(table_id, count) in reloaded

                self._engine.forget_where(taken_over)
                if self._presence is not None:
                    self._presence.rearm_where(taken_over)
            lost = self._owned - partitions
            if lost and count:
                # Another replica serves them now: nothing of theirs stays here (it would be stale
                # if they came back, and their deadlines are not this process's to fire).
                self._engine.forget_where(lambda table_id: partition_of(table_id, count) in lost)
            directory = dict(self._directory)
            directory.update({partition: Owner(self.address, epochs[partition]) for partition in partitions})
            for partition in lost:  # no longer ours; the next read of the directory names the new owner
                if partition in directory and directory[partition].address == self.address:
                    del directory[partition]
            self._claimed.update(epochs)
            self._partitions = count or self._partitions
            self._directory = MappingProxyType(directory)
            self._owned = partitions
            # From the first assignment on, the engine serves and writes only what this replica
            # owns (before it, `routing` sends nothing here: no partition is known yet).
            self._engine.owns = self.owns
            self._engine.fence = self.fence
            self._engine.fence_condition = self.fence_condition
            self.assigned_once.set()
        loaded = self._load_live_tables(reloaded)
        if self._taken_over is not None:
            self._taken_over.inc(len(reloaded))
        logger.info(
            "table partitions assigned",
            extra={
                "topic": self.topic,
                "owned": sorted(partitions),
                "taken_over": sorted(reloaded),
                "lost": sorted(lost),
                "tables_loaded": loaded,
            },
        )

    def _claim(self, session: Session, partitions: frozenset[int]) -> tuple[dict[int, int], frozenset[int]]:
        """Write this replica as the owner of `partitions`; their epochs, and those it owned all
        along (its own claim still there)."""
        if not partitions:
            return {}, frozenset()
        now = self._clock()
        insert = (postgresql.insert if session.bind.dialect.name == "postgresql" else sqlite.insert)(  # type: ignore[union-attr]
            table_partition_owners
        )
        session.execute(
            insert.on_conflict_do_nothing(index_elements=["topic", "partition"]),
            [
                {
                    "topic": self.topic,
                    "partition": partition,
                    "owner_address": "",
                    "owner_instance": "",
                    "epoch": 0,
                    "claimed_at": now,
                }
                for partition in sorted(partitions)
            ],
        )
        rows = session.execute(
            sqlalchemy.select(
                table_partition_owners.c.partition,
                table_partition_owners.c.owner_instance,
                table_partition_owners.c.epoch,
            )
            .where(
                table_partition_owners.c.topic == self.topic,
                table_partition_owners.c.partition.in_(sorted(partitions)),
            )
            .order_by(table_partition_owners.c.partition)
            .with_for_update()
        ).all()
        epochs: dict[int, int] = {}
        continuous: set[int] = set()
        for row in rows:
            if row.owner_instance == self.instance_id and self._claimed.get(row.partition) == row.epoch:
                epochs[row.partition] = int(row.epoch)
                continuous.add(row.partition)
                continue
            epochs[row.partition] = int(row.epoch) + 1
            session.execute(
                _CLAIM,
                {
                    "claimed_topic": self.topic,
                    "claimed_partition": row.partition,
                    "owner_address": self.address,
                    "owner_instance": self.instance_id,
                    "epoch": epochs[row.partition],
                    "claimed_at": now,
                },
            )
        return epochs, frozenset(continuous)

    def _grant_takeover_grace(self, session: Session, partitions: frozenset[int]) -> None:
        """A deadline that has passed, or would pass within TAKEOVER_GRACE (the partition may have
        had no owner for a session timeout: no call reached its tables), is moved to TAKEOVER_GRACE
        from now, so the player waited on can reconnect and act before the server acts for them.
        Every live table of the partitions alike: nothing depends on a hand."""
        if not partitions:
            return
        granted = self._clock() + TAKEOVER_GRACE
        session.execute(
            table_status.update()
            .where(
                table_status.c.match_partition.in_(sorted(partitions)),
                table_status.c.ended.is_(False),
                table_status.c.deadline_at < granted,
            )
            .values(deadline_at=granted)
        )

    def _load_live_tables(self, partitions: frozenset[int]) -> int:
        """Fold the live tables of `partitions` from the event store into memory and wake their
        watchers; their timers are the status rows' deadlines, which `deadlines` now reads."""
        if not partitions:
            return 0
        loaded = []
        with read_transaction(self._session_factory) as session:
            table_ids = session.execute(
                sqlalchemy.select(table_status.c.table_id).where(
                    table_status.c.match_partition.in_(sorted(partitions)), table_status.c.ended.is_(False)
                )
            ).scalars()
            for table_id in table_ids:
                loaded.append(self._engine.load_state(session, table_id))
        for state in loaded:
            self._engine.changes.notify(state.table_id, state.version)
        return len(loaded)

    def fence(self, session: Session, table_ids: Sequence[str]) -> None:
        """First in a write transaction: `TableMovedError` unless the directory still names this
        process, at the epoch it claimed, as the owner of every table written. The rows are read
        with a share lock (PostgreSQL; on SQLite every writer holds the database), so a takeover's
        claim waits for the writes in flight and every later write of this process fails: the new
        owner, which loads the tables after its claim commits, misses none of them."""
        if session.get_bind().dialect.name == "sqlite":
            condition, parameters = self.fence_condition(table_ids)
            if not session.connection().exec_driver_sql(f"SELECT {condition}", parameters).scalar_one():
                raise TableMovedError
            return
        partitions, claimed = self._fenced_partitions(table_ids)
        rows = session.execute(_FENCE, {"fenced_topic": self.topic, "partitions": partitions}).all()
        held = {row.partition: (row.owner_instance, int(row.epoch)) for row in rows}
        for partition in partitions:
            if held.get(partition) != (self.instance_id, claimed[partition]):
                raise TableMovedError

    def fence_condition(self, table_ids: Sequence[str]) -> SqlCondition:
        """SQLite: `fence` as a condition for the caller to check in one of its own statements
        (the group commit's version check, `EventStore.append_batch`): true when the directory
        names this process, at the epoch it claimed, as the owner of every table written.
        `TableMovedError` at once when this replica knows it does not own one of them. No row
        locks to take (every writer holds the database): one row, how many of the partitions
        name this process at its epoch, instead of a row per partition (each a GIL release)."""
        partitions, claimed = self._fenced_partitions(table_ids)
        epochs = tuple(value for partition in partitions for value in (partition, claimed[partition]))
        return _fenced_count_text(len(partitions)), (self.topic, self.instance_id, *epochs, len(partitions))

    def _fenced_partitions(self, table_ids: Sequence[str]) -> tuple[list[int], Mapping[int, int]]:
        """The partitions of `table_ids`, in order, and the epochs claimed; `TableMovedError` when
        one of them is not this replica's."""
        count = self._partitions
        if not count:
            raise TableMovedError
        partitions = sorted({partition_of(table_id, count) for table_id in table_ids})
        owned, claimed = self._owned, self._claimed
        if any(partition not in owned or partition not in claimed for partition in partitions):
            raise TableMovedError
        return partitions, claimed

    # ------------------------------------------------------------------ the directory

    def refresh_directory(self) -> Mapping[int, Owner]:
        """Read the owner directory (every partition's owner); this replica's own partitions are
        what it knows of them."""
        with read_transaction(self._session_factory) as session:
            rows = session.execute(
                sqlalchemy.select(
                    table_partition_owners.c.partition,
                    table_partition_owners.c.owner_address,
                    table_partition_owners.c.epoch,
                ).where(
                    table_partition_owners.c.topic == self.topic, table_partition_owners.c.owner_address != ""
                )
            ).all()
        owned = self._owned
        directory = {row.partition: Owner(row.owner_address, int(row.epoch)) for row in rows}
        for partition in owned:
            directory[partition] = Owner(self.address, self._claimed.get(partition, 0))
        self._directory = MappingProxyType(directory)
        return self._directory


_FENCE = (
    sqlalchemy.select(
        table_partition_owners.c.partition,
        table_partition_owners.c.owner_instance,
        table_partition_owners.c.epoch,
    )
    .where(
        table_partition_owners.c.topic == sqlalchemy.bindparam("fenced_topic"),
        table_partition_owners.c.partition.in_(sqlalchemy.bindparam("partitions", expanding=True)),
    )
    .order_by(table_partition_owners.c.partition)  # locked in one order by every writer and claim
    .with_for_update(read=True)
)


@functools.cache
def _fenced_count_text(partitions: int) -> str:
    """SQLite: whether the directory names this process (topic, instance) as the owner of all
    `partitions` (partition, epoch) pairs (their count, the last parameter)."""
    pairs = ", ".join(["(?, ?)"] * partitions)
    return (
        "((SELECT count(*) FROM table_partition_owners WHERE topic = ? AND owner_instance = ? "
        f"AND (partition, epoch) IN (VALUES {pairs})) = ?)"
    )


_CLAIM = (
    table_partition_owners.update()
    .where(
        table_partition_owners.c.topic == sqlalchemy.bindparam("claimed_topic"),
        table_partition_owners.c.partition == sqlalchemy.bindparam("claimed_partition"),
    )
    .values(
        owner_address=sqlalchemy.bindparam("owner_address"),
        owner_instance=sqlalchemy.bindparam("owner_instance"),
        epoch=sqlalchemy.bindparam("epoch"),
        claimed_at=sqlalchemy.bindparam("claimed_at"),
    )
)


class DirectoryWorker:
    """Reads the owner directory every DIRECTORY_REFRESH_SECONDS (a background worker, see
    `service_runtime.Worker`), so calls for a table another replica took over are forwarded there."""

    def __init__(self, ownership: Ownership, interval_seconds: float = DIRECTORY_REFRESH_SECONDS) -> None:
        self._ownership = ownership
        self._interval_seconds = interval_seconds

    def run_forever(self, stop_event: threading.Event) -> None:
        while not stop_event.is_set():
            self._ownership.refresh_directory()
            stop_event.wait(self._interval_seconds)

    def close(self) -> None:
        """Nothing to release."""
