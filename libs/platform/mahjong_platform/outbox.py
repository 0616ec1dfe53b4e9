"""The transactional outbox and its relay to Kafka.

Writing an event to the database and publishing it to Kafka are two systems; doing both directly
(a "dual write") loses or invents events when a process dies between them. Instead the event store
writes each event to `outbox_messages` in the same transaction as the event itself, and the
`OutboxRelay` publishes unsent rows with Kafka's idempotent producer, waits until Kafka has them
(`acks=all`), and only then marks them sent.

A crash after publishing but before marking re-sends those messages on restart. That is the
deliberate trade: at-least-once delivery, made effectively exactly-once by consumers that ignore
event ids they have already applied (see `tracked_consumer`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import sqlalchemy
from kafka import KafkaProducer
from kafka.errors import KafkaError
from kafka.partitioner.default import DefaultPartitioner, murmur2
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from mahjong_platform.database import (
    create_session_factory,
    insert_rows,
    one_of,
    read_transaction,
    transaction,
)
from mahjong_platform.envelopes import Clock, utc_now
from mahjong_platform.metrics import metrics_for_engine
from mahjong_platform.schema import outbox_messages

logger = logging.getLogger(__name__)

RELAY_BATCH_SIZE_DEFAULT = 100
RELAY_BATCH_SIZE_MAX = 10_000
PUBLISH_TIMEOUT_MS_DEFAULT = 30_000
POLL_INTERVAL_MS_DEFAULT = 200
SQLITE_POLL_INTERVAL_MS = 2_000
"""SQLite, `OutboxRelay.run_forever`: how long the relay waits unwoken when it has nothing to do,
at least (its `poll_interval_ms` when longer). Every transaction of its process that queues outbox
rows wakes it at its commit (`_RELAY_WAKE_UPS`), and one process writes a SQLite database (one
relay per database), so the poll only finds rows written by another process, such as an
administrator's tool; a relay that starts or restarts reads the outbox at once. Polling every
`POLL_INTERVAL_MS_DEFAULT`, the reads of an empty outbox were about 0.006 CPU s per second of every
idle service (a third of scoring's, the ledger's and matchmaking's). PostgreSQL keeps the short
poll: the replicas of a service share its database, and only one of their relays publishes."""
RELAY_PRODUCER_LINGER_MS_MAX = 1_000
"""The relay's producer lingers this long (at most a quarter of its publish timeout): the relay
sends a round's messages and then flushes them, so they leave at the flush in one produce request.
With kafka-python's 5 ms a round whose sends took longer (its thread waiting for the GIL behind a
busy service's others) had its first batches sent alone by the producer's own thread, then the rest
at the flush: two produce requests, and two acknowledgements to wait for."""
ROUND_INTERVAL_MS_DEFAULT = 50
"""`OutboxRelay.run_forever`: after a round that published, the next one starts no sooner than
this after it (a commit meanwhile waits that long; the first message after a quiet spell leaves at
once). A busy table engine commits every few milliseconds and woke its relay each time: about 14
rounds a game, each a read of the outbox, a produce request to Kafka and its acknowledgement, and
a fetch answer to every consumer of the topic; spaced, a round carries several commits."""
RETRY_PAUSE_MS_MAX = 10_000
SQLITE_MARK_SENT_SECONDS = 0.25
"""SQLite, `OutboxRelay.run_forever`: how long rows Kafka acknowledged may wait to be marked sent,
so that one mark covers the rounds of that time. A mark is a write transaction, so it takes the
database's one write lock (and a commit with its fsync) from the service's own writers: a busy
table engine's relay marked after every group commit, and its group committer waited for that
lock for a fifth of its time. A crash before the mark re-sends those rows, as before
(at-least-once; consumers skip what they applied)."""


class _Unmarked(NamedTuple):
    """SQLite: the rows a relay published but has not marked sent yet (`OutboxRelay.run_forever`)."""

    first_id: int
    last_id: int
    rows: int
    since: float
    """When the first of them was published (monotonic seconds)."""

    def seconds_until_due(self, within_seconds: float) -> float:
        """How much longer their mark may wait (at most 0: mark now)."""
        return self.since + within_seconds - time.monotonic()


@dataclasses.dataclass(slots=True)
class _Offer:
    """SQLite: a due mark the relay offers to the next write transaction of its process that queues
    outbox messages (the table engine's group commit, a consumer's batch), so the mark rides on a
    transaction that takes the write lock anyway instead of taking it for one of its own (a
    transaction is a few GIL hand-offs and a fsync, and the group committer waited for each
    mark). OFFERED until a committing transaction takes it (TAKEN, then MARKED at its commit, or
    OFFERED again at its rollback); one nobody took within the mark interval is withdrawn and
    marked by the relay itself."""

    unmarked: _Unmarked
    offered_at: float
    clock: Clock
    """The relay's clock: what the carrier stamps `sent_at` with (as the relay's own mark would)."""
    state: str = "offered"
    marked_rows: int = -1

    def seconds_until_withdrawn(self, within_seconds: float) -> float:
        """How much longer it stays offered if nobody takes it (at most 0: withdraw it now)."""
        return self.offered_at + within_seconds - time.monotonic()


_OFFERED, _TAKEN, _MARKED, _WITHDRAWN = "offered", "taken", "marked", "withdrawn"
_OFFERS: weakref.WeakKeyDictionary[Engine, _Offer] = weakref.WeakKeyDictionary()
"""The mark each SQLite relay of this process offers, by the relay's database engine."""
_OFFERS_LOCK = threading.Lock()
_OFFER_KEY = "mahjong_outbox_offer"


@dataclasses.dataclass(frozen=True, slots=True)
class OutboxMessage:
    """One unsent outbox row, as the relay publishes it."""

    id: int
    topic: str
    message_key: str
    message_value: bytes
    event_id: str


def add_outbox_messages(session: Session, messages: Sequence[dict[str, object]]) -> None:
    """Queue several messages (dicts with topic, message_key, message_value, event_id and
    created_at) in one statement, inside the caller's transaction; the event store calls this
    with every appended batch of events. The commit wakes this process's relays, and on SQLite
    hands the rows written outside any savepoint, with their ids, to its relay (`_Feed`)."""
    if messages:
        rows = [{**message, "sent_at": None} for message in messages]
        last_id = insert_rows(session, outbox_messages, rows)
        session.info[_WRITTEN_KEY] = True
        if last_id is not None and not session.in_nested_transaction():
            # SQLite numbers a statement's new rows one after another (`insert_rows`).
            session.info.setdefault(_FED_KEY, []).append((last_id - len(rows) + 1, rows))


_WRITTEN_KEY = "mahjong_outbox_written"
_FED_KEY = "mahjong_outbox_fed"
RELAY_FEED_ROWS_MAX = 10_000
"""SQLite: the most rows a relay's `_Feed` holds; beyond, it forgets them all (the relay reads them)."""


class _Feed:
    """SQLite: the outbox rows this process's committed transactions wrote, in runs of consecutive
    ids, for its relay to publish without reading them back: a read was a transaction of its own
    and a step of the driver (a GIL release and re-acquire, behind a busy event loop) per row.

    Only what is certainly in the database gets here: rows written outside any savepoint (one
    rolled back may leave its ids to later rows), handed over after their transaction committed.
    The database stays the truth: the relay takes from here only the run that continues exactly
    after the last id it published, and reads the outbox as before whenever this holds nothing
    that continues it (a gap: rows of a savepoint, of another process, a run handed over late,
    a relay that just started or failed to publish). Its marks are the same either way."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: collections.deque[tuple[int, Sequence[Mapping[str, Any]]]] = collections.deque()
        self._rows = 0

    def add(self, runs: Sequence[tuple[int, Sequence[Mapping[str, Any]]]]) -> None:
        """Runs of committed rows: (the first row's id, the rows in id order) each."""
        with self._lock:
            for first_id, rows in runs:
                self._runs.append((first_id, rows))
                self._rows += len(rows)
            if self._rows > RELAY_FEED_ROWS_MAX:  # the relay is not keeping up: it reads them
                self._runs.clear()
                self._rows = 0

    def take(self, first_id: int, most: int) -> list[OutboxMessage] | None:
        """The messages numbered `first_id`, `first_id` + 1, ... (at most `most`, stopping at a
        gap) when a run continues there; None when none does (the caller reads the outbox).
        Runs that end before `first_id` (published from a read) are dropped."""
        taken: list[OutboxMessage] = []
        next_id = first_id
        with self._lock:
            runs = self._runs
            while runs and len(taken) < most:
                start, rows = runs[0]
                if start + len(rows) <= next_id:  # published already
                    runs.popleft()
                    self._rows -= len(rows)
                    continue
                if start > next_id:  # a gap: rows this feed was not given
                    break
                offset = next_id - start
                count = min(len(rows) - offset, most - len(taken))
                taken += [
                    OutboxMessage(
                        id=next_id + index,
                        topic=str(row["topic"]),
                        message_key=str(row["message_key"]),
                        message_value=bytes(row["message_value"]),
                        event_id=str(row["event_id"]),
                    )
                    for index, row in enumerate(rows[offset : offset + count])
                ]
                next_id += count
                if offset + count == len(rows):
                    runs.popleft()
                    self._rows -= len(rows)
        return taken or None


_FEEDS: weakref.WeakKeyDictionary[Engine, _Feed] = weakref.WeakKeyDictionary()
"""SQLite: the feed of each relay of this process, by the relay's database engine."""
_RELAY_WAKE_UPS: weakref.WeakSet[threading.Event] = weakref.WeakSet()
"""One event per relay in this process, set when a transaction that queued outbox messages
commits: a relay waits on its own (at most its poll interval) instead of sleeping, so a message
leaves right after its commit, and no relay's wake-up is consumed by another's."""
_RELAY_WAKE_UPS_LOCK = threading.Lock()


@sqlalchemy.event.listens_for(Session, "before_commit")
def _mark_an_offered_mark(session: Session) -> None:
    """A transaction that queued outbox messages carries its relay's offered mark (`_Offer`)."""
    if session.in_nested_transaction() or not session.info.get(_WRITTEN_KEY):
        return
    engine = session.get_bind()
    if not isinstance(engine, Engine):
        return
    with _OFFERS_LOCK:
        offer = _OFFERS.get(engine)
        if offer is None or offer.state != _OFFERED:
            return
        offer.state = _TAKEN
    session.info[_OFFER_KEY] = offer
    first_id, last_id, _count, _since = offer.unmarked
    try:
        marked = session.connection().execute(
            _MARK_SENT_RANGE, {"first_id": first_id, "last_id": last_id, "marked_at": offer.clock()}
        )
    except Exception:  # never the carrier's failure: the relay marks them itself
        logger.warning("an offered outbox mark failed; the relay marks it", exc_info=True)
        _settle_offer(session, _OFFERED)
        return
    offer.marked_rows = marked.rowcount


def _settle_offer(session: Session, state: str) -> None:
    offer = session.info.pop(_OFFER_KEY, None)
    if offer is not None:
        with _OFFERS_LOCK:
            offer.state = state


@sqlalchemy.event.listens_for(Session, "after_commit")
def _outbox_committed(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint released: the rows are not committed until the outer transaction is
    _settle_offer(session, _MARKED)
    fed = session.info.pop(_FED_KEY, None)
    if fed is not None:
        engine = session.get_bind()
        with _OFFERS_LOCK:
            feed = _FEEDS.get(engine) if isinstance(engine, Engine) else None
        if feed is not None:
            feed.add(fed)
    if session.info.pop(_WRITTEN_KEY, False):
        with _RELAY_WAKE_UPS_LOCK:
            wake_ups = list(_RELAY_WAKE_UPS)
        for wake_up in wake_ups:
            wake_up.set()


@sqlalchemy.event.listens_for(Session, "after_soft_rollback")
def _outbox_rolled_back(session: Session, previous_transaction: Any) -> None:
    if not previous_transaction.nested:  # the whole transaction is gone, its rows with it
        session.info.pop(_WRITTEN_KEY, None)
        session.info.pop(_FED_KEY, None)
        _settle_offer(session, _OFFERED)  # its mark too: offered again


def count_unsent_outbox_messages(session: Session) -> int:
    """How many outbox messages wait for the relay (for health checks, metrics and tests)."""
    query = sqlalchemy.select(sqlalchemy.func.count()).where(outbox_messages.c.sent_at.is_(None))
    return int(session.execute(query).scalar_one())


STOP_CHECK_SECONDS = 0.25


def _wait_for_commit(stop_event: threading.Event, wake_up: threading.Event, seconds: float) -> None:
    """Wait until an outbox commit in this process (`wake_up`), `seconds` passed, or `stop_event`
    is set (checked every STOP_CHECK_SECONDS). A commit after the relay's last read leaves the event
    set, so the wait returns at once and nothing waits a poll interval for nothing."""
    deadline = time.monotonic() + seconds
    while not stop_event.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0 or wake_up.wait(min(remaining, STOP_CHECK_SECONDS)):
            break
    wake_up.clear()


KEY_HASHES_MAX = 4_096
"""Keys whose hash `KeyHashCachingPartitioner` keeps (a key is a stream id: a table's events
share one)."""


class KeyHashCachingPartitioner(DefaultPartitioner):  # type: ignore[misc]
    """kafka-python's default partitioner (Kafka's: murmur2 of the key modulo the partition
    count), with each key's hash kept: the pure-Python murmur2 of a 36-byte stream id took about
    10 us per message, and a stream's events share their key. The partition is exactly the
    default's (the table engine's ownership follows Kafka's partitioner); a message without a key
    goes through the default as before."""

    def __init__(self) -> None:
        self._hashes: dict[bytes, int] = {}
        self._lock = threading.Lock()

    def partition(
        self,
        topic: str,
        key: object,
        serialized_key: bytes | None,
        value: object,
        serialized_value: bytes | None,
        cluster: Any,
    ) -> int:
        partitions = cluster.partitions_for_topic(topic) if serialized_key is not None else None
        if not partitions:
            return int(super().partition(topic, key, serialized_key, value, serialized_value, cluster))
        assert serialized_key is not None
        hashed = self._hashes.get(serialized_key)
        if hashed is None:
            hashed = murmur2(serialized_key) & 0x7FFFFFFF
            with self._lock:
                if len(self._hashes) >= KEY_HASHES_MAX:
                    self._hashes.clear()
                self._hashes[serialized_key] = hashed
        ordered = sorted(partitions)
        return int(ordered[hashed % len(ordered)])


def create_idempotent_producer(
    bootstrap_servers: str | list[str], *, client_id: str, delivery_timeout_ms: int, linger_ms: int = 5
) -> KafkaProducer:
    """A Kafka producer that neither loses nor duplicates within a session: `acks=all` plus
    idempotence. A send that Kafka has not acknowledged within `delivery_timeout_ms` fails.

    Its partitioner is Kafka's, with each key's hash kept (`KeyHashCachingPartitioner`), and it
    keeps no client metrics (nothing reads kafka-python's own sensors; recording them was a few
    per cent of a relay's work on every send and response).

    `linger_ms`: how long a message may wait for others before its batch is sent unasked (a
    `flush` sends at once); see `RELAY_PRODUCER_LINGER_MS_MAX` for the relay's."""
    # kafka-python requires delivery_timeout_ms >= linger_ms + request_timeout_ms; half the
    # delivery budget per request leaves room for one retry.
    request_timeout_ms = min(delivery_timeout_ms // 2, 30_000)
    assert request_timeout_ms > linger_ms, delivery_timeout_ms
    return KafkaProducer(
        bootstrap_servers=bootstrap_servers,
        client_id=client_id,
        acks="all",
        enable_idempotence=True,
        # Idempotence keeps order per partition with up to 5 requests in flight.
        max_in_flight_requests_per_connection=5,
        linger_ms=linger_ms,
        request_timeout_ms=request_timeout_ms,
        delivery_timeout_ms=delivery_timeout_ms,
        max_block_ms=delivery_timeout_ms,
        partitioner=KeyHashCachingPartitioner(),
        metrics_enabled=False,
    )


BeforeMarkSentHook = Callable[[Sequence[OutboxMessage]], None]
"""Called after a batch is in Kafka and before it is marked sent; tests raise here to simulate a
relay killed between the two steps."""


RELAY_ADVISORY_LOCK_KEY = 0x6D6A5F6F7574626F  # "mj_outbo": one relay per database at a time.
_TAKE_RELAY_LOCK = sqlalchemy.text("SELECT pg_try_advisory_lock(:key)").bindparams(
    key=RELAY_ADVISORY_LOCK_KEY
)
_RELEASE_RELAY_LOCK = sqlalchemy.text("SELECT pg_advisory_unlock(:key)").bindparams(
    key=RELAY_ADVISORY_LOCK_KEY
)
RELAY_KEEPALIVE_IDLE_SECONDS = 10
RELAY_KEEPALIVE_INTERVAL_SECONDS = 5
RELAY_KEEPALIVE_COUNT = 3
_RELAY_KEEPALIVES = sqlalchemy.text(
    "SELECT set_config('tcp_keepalives_idle', :idle, false), "
    "set_config('tcp_keepalives_interval', :interval, false), "
    "set_config('tcp_keepalives_count', :count, false)"
).bindparams(
    idle=str(RELAY_KEEPALIVE_IDLE_SECONDS),
    interval=str(RELAY_KEEPALIVE_INTERVAL_SECONDS),
    count=str(RELAY_KEEPALIVE_COUNT),
)
"""The server probes the relay's connection when idle, so the lock of a replica whose host vanished
(no FIN) is released within about 25 s, not the operating system's two hours."""


class OutboxRelay:
    """Publishes the outbox to Kafka in id order and marks what Kafka acknowledged as sent.

    Under PostgreSQL one relay of the database publishes at a time: the relay that holds a
    session-level advisory lock on its own connection (taken at its first round and kept while it
    relays; another replica's relay tries again each round and publishes nothing meanwhile). Two
    relays publishing different batches at once could put a stream's later event on Kafka before
    its earlier one, and consumers rely on each stream's order. The lock ends with the relay's
    session: at `close`, when its process dies (the server sees the socket close; a vanished host
    is found by TCP keepalives, `_RELAY_KEEPALIVES`), or when a publish fails (released, so a
    replica that can reach Kafka takes over); the next relay reads from the lowest unsent id, so
    it re-sends what the old one published but had not marked (at-least-once, as after a crash).
    Holding the lock, the relay needs no transaction: its connection is in autocommit, a round is
    two statements (read the lowest unsent rows, mark the published ones by id), where a round
    that took and released the lock with a transaction was six round trips (pool check-out with
    its ping, BEGIN, the lock, the read, the mark, COMMIT), each one a wait for the GIL in a busy
    service (a table engine round took 55 ms at the median, 21 of them these waits).

    Under SQLite there is one writer per database anyway, and holding its single write lock while
    waiting for Kafka would stall every other writer, so the rows are read, published and marked in
    separate short transactions; run one relay per SQLite database. `run_forever` marks what it
    published at most every SQLITE_MARK_SENT_SECONDS, in one statement for all the rounds of
    that time, which it first offers to the process's next transaction that queues outbox rows
    (`_Offer`) and runs in a transaction of its own only when none took it within as long;
    meanwhile the next round reads the unsent rows after the last one it published (the one
    writer numbers the rows in commit order, so none can appear before it).
    """

    def __init__(
        self,
        engine: Engine,
        bootstrap_servers: str | list[str],
        *,
        batch_size: int = RELAY_BATCH_SIZE_DEFAULT,
        publish_timeout_ms: int = PUBLISH_TIMEOUT_MS_DEFAULT,
        client_id: str = "mahjong-outbox-relay",
        clock: Clock = utc_now,
        before_mark_sent: BeforeMarkSentHook | None = None,
    ) -> None:
        assert 1 <= batch_size <= RELAY_BATCH_SIZE_MAX, batch_size
        assert publish_timeout_ms > 0, publish_timeout_ms
        self._engine = engine
        self._session_factory = create_session_factory(engine)
        self._postgresql = engine.dialect.name == "postgresql"
        self._connection: sqlalchemy.Connection | None = None  # PostgreSQL: the one holding the lock
        self._holds_lock = False
        self._batch_size = batch_size
        self._publish_timeout_ms = publish_timeout_ms
        self._clock = clock
        self._before_mark_sent = before_mark_sent
        self._published = metrics_for_engine(engine).outbox_published
        self._rounds = metrics_for_engine(engine).outbox_rounds
        self._producer = create_idempotent_producer(
            bootstrap_servers,
            client_id=client_id,
            delivery_timeout_ms=publish_timeout_ms,
            linger_ms=min(RELAY_PRODUCER_LINGER_MS_MAX, publish_timeout_ms // 4),
        )
        self._unmarked: _Unmarked | None = None
        self._offer: _Offer | None = None  # SQLite: the mark offered to this process's writers
        self._withdraw_an_ownerless_offer()
        # SQLite: the rows this process commits, handed over (`_Feed`), and the last id published.
        self._feed: _Feed | None = None
        self._published_up_to: int | None = None
        self.rounds_fed = 0
        self.rounds_read = 0
        if not self._postgresql:
            self._feed = _Feed()
            with _OFFERS_LOCK:
                _FEEDS[engine] = self._feed
        self._wake_up = threading.Event()
        with _RELAY_WAKE_UPS_LOCK:
            _RELAY_WAKE_UPS.add(self._wake_up)

    def run_once(self, mark_within_seconds: float = 0.0) -> int:
        """Publish one batch of unsent messages and mark them sent; return how many were published.

        `mark_within_seconds` (SQLite): the mark may wait that long after the first publish it
        covers (`SQLITE_MARK_SENT_SECONDS`); 0 marks everything published now."""
        if self._postgresql:
            connection = self._locked_connection()
            if connection is None:
                return 0  # Another replica's relay is publishing; it keeps the order.
            messages = self._read_unsent(connection)
            if messages:
                self._publish(messages)
                ids = {"ids": [message.id for message in messages]}
                self._mark_sent(connection, _MARK_SENT_POSTGRESQL, ids, len(messages))
                self._published.inc(len(messages))
            return len(messages)
        # The rows this process committed after the last ones published, as its writers handed
        # them over (`_Feed`); else read: reading takes no write lock (SQLite's writers queue for
        # one); the mark does.
        fed: list[OutboxMessage] | None = None
        if self._feed is not None and self._published_up_to is not None:
            fed = self._feed.take(self._published_up_to + 1, self._batch_size)
        if fed is not None:
            self.rounds_fed += 1
            messages = fed
        else:
            self.rounds_read += 1
            unmarked = self._unmarked or (self._offer.unmarked if self._offer else None)
            with read_transaction(self._session_factory) as session:
                messages = self._read_unsent(session, after_id=unmarked.last_id if unmarked else 0)
        if messages:
            self._publish(messages)
            self._published_up_to = messages[-1].id
            if self._unmarked is None:
                self._unmarked = _Unmarked(messages[0].id, messages[-1].id, len(messages), time.monotonic())
            else:
                self._unmarked = self._unmarked._replace(
                    last_id=messages[-1].id, rows=self._unmarked.rows + len(messages)
                )
        self._settle_offer(mark_within_seconds)
        if self._unmarked is not None and self._unmarked.seconds_until_due(mark_within_seconds) <= 0:
            if mark_within_seconds <= 0:
                self._mark_unmarked()
            elif self._offer is None:  # offered to the next writer that commits outbox rows
                self._offer = _Offer(self._unmarked, time.monotonic(), self._clock)
                self._unmarked = None
                with _OFFERS_LOCK:
                    _OFFERS[self._engine] = self._offer
        return len(messages)

    def _withdraw_an_ownerless_offer(self) -> None:
        """SQLite: forget the offered mark a closed relay of this engine left behind. `close` leaves
        an offer a writer has taken (it marks at its commit), and when that writer rolls back the
        offer is OFFERED again with no relay to count or withdraw it. Its rows are unsent as far as
        this relay knows: it reads them again and publishes them (at-least-once, as after a
        crash); the writer that still carries the mark may mark some of them first, hence the
        marks' ``rowcount`` of at most the rows."""
        with _OFFERS_LOCK:
            stale = _OFFERS.pop(self._engine, None)
            if stale is not None and stale.state == _OFFERED:
                stale.state = _WITHDRAWN

    def _settle_offer(self, within_seconds: float) -> None:
        """SQLite: count an offered mark a writer committed; withdraw and mark one nobody took
        within `within_seconds`."""
        offer = self._offer
        if offer is None:
            return
        with _OFFERS_LOCK:
            if offer.state == _OFFERED and offer.seconds_until_withdrawn(within_seconds) <= 0:
                offer.state = _WITHDRAWN
            if offer.state in (_MARKED, _WITHDRAWN) and _OFFERS.get(self._engine) is offer:
                del _OFFERS[self._engine]
        if offer.state == _MARKED:
            # At most the rows offered: fewer when a closed relay's carrier marked some of them
            # (see `_withdraw_an_ownerless_offer`).
            assert 0 <= offer.marked_rows <= offer.unmarked.rows, (offer.marked_rows, offer.unmarked.rows)
            self._published.inc(offer.unmarked.rows)
            self._offer = None
        elif offer.state == _WITHDRAWN:
            self._offer = None
            self._mark_range(offer.unmarked)

    def _mark_unmarked(self) -> None:
        """SQLite: mark sent every row published since the last mark, in one transaction (an
        offered mark nobody has taken yet too)."""
        self._settle_offer(0.0)
        if self._unmarked is not None:
            self._mark_range(self._unmarked)
            self._unmarked = None

    def _mark_range(self, unmarked: _Unmarked) -> None:
        first_id, last_id, count, _since = unmarked
        # Its one writer at a time numbers the rows in commit order, and the rows published are the
        # lowest unsent ids read (each round after the previous one's), so every row between the
        # first and the last is one of them or was sent before (one statement text for any count).
        with transaction(self._session_factory) as session:
            ids = {"first_id": first_id, "last_id": last_id}
            self._mark_sent(session.connection(), _MARK_SENT_RANGE, ids, count)
        self._published.inc(count)

    def _locked_connection(self) -> sqlalchemy.Connection | None:
        """PostgreSQL: the relay's own connection once it holds the relay lock, else None."""
        if self._connection is None:
            connection = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            # Out of the pool: closed for good at `close`, and the lock with its session (back in
            # the pool, the lock would stay with whoever checked the connection out next).
            connection.detach()
            connection.execute(_RELAY_KEEPALIVES)
            self._connection = connection
        if not self._holds_lock:
            self._holds_lock = bool(self._connection.execute(_TAKE_RELAY_LOCK).scalar_one())
        return self._connection if self._holds_lock else None

    def _release_lock(self) -> None:
        if self._connection is not None and self._holds_lock:
            self._holds_lock = False
            self._connection.execute(_RELEASE_RELAY_LOCK)

    def run_forever(
        self,
        stop_event: threading.Event,
        poll_interval_ms: int = POLL_INTERVAL_MS_DEFAULT,
        round_interval_ms: int = ROUND_INTERVAL_MS_DEFAULT,
    ) -> None:
        """Relay until `stop_event` is set; a full batch is followed immediately by the next one,
        and a commit of new outbox messages in this process ends the wait (`_RELAY_WAKE_UPS`), but
        a round that published is followed by the next no sooner than `round_interval_ms` after
        its start (`ROUND_INTERVAL_MS_DEFAULT`); other writers (another process) are found by
        polling every `poll_interval_ms` (SQLite: at least every `SQLITE_POLL_INTERVAL_MS`).

        A Kafka failure (broker down, publish timeout) is logged and retried after a growing pause
        of at most `RETRY_PAUSE_MS_MAX`: nothing was marked sent, so nothing is lost; under
        PostgreSQL the relay lock is released for the pause. A database error propagates, as the
        relay cannot make progress without its database.
        """
        assert poll_interval_ms > 0, poll_interval_ms
        assert round_interval_ms >= 0, round_interval_ms
        retry_pause_ms = poll_interval_ms
        unwoken_ms = poll_interval_ms if self._postgresql else max(poll_interval_ms, SQLITE_POLL_INTERVAL_MS)
        while not stop_event.is_set():
            round_started = time.monotonic()
            try:
                published_count = self.run_once(mark_within_seconds=SQLITE_MARK_SENT_SECONDS)
            except KafkaError:
                logger.warning("outbox relay could not publish; retrying", exc_info=True)
                self._release_lock()  # a replica that reaches Kafka may publish meanwhile
                stop_event.wait(retry_pause_ms / 1000)
                retry_pause_ms = min(retry_pause_ms * 2, RETRY_PAUSE_MS_MAX)
                continue
            retry_pause_ms = poll_interval_ms
            if published_count < self._batch_size:
                wait_seconds = unwoken_ms / 1000
                if self._offer is None and self._unmarked is not None:
                    # No longer than until their mark is due (while an offer is out, the rows
                    # published since wait for it to settle: a due mark could not be offered).
                    due = self._unmarked.seconds_until_due(SQLITE_MARK_SENT_SECONDS)
                    wait_seconds = max(0.0, min(wait_seconds, due))
                if self._offer is not None and self._offer.state == _OFFERED:
                    # Nor than until an offer nobody takes is withdrawn (one a writer has taken is
                    # settled at its commit or rollback, and that commit wakes the relay).
                    due = self._offer.seconds_until_withdrawn(SQLITE_MARK_SENT_SECONDS)
                    wait_seconds = max(0.0, min(wait_seconds, due))
                if published_count:
                    # Commits meanwhile leave the wake-up set: the wait below returns at once.
                    spacing = round_started + round_interval_ms / 1000 - time.monotonic()
                    if spacing > 0:
                        if stop_event.wait(spacing):
                            break
                        wait_seconds = max(0.0, wait_seconds - spacing)
                _wait_for_commit(stop_event, self._wake_up, wait_seconds)
        self._mark_unmarked()  # stopping: what Kafka has is not sent again after a restart

    def close(self) -> None:
        """Close the relay's connection (under PostgreSQL: releases the relay lock, then ends its
        session), then flush and close the Kafka producer.

        The lock is released by a statement first: the server frees a closed session's locks only
        when its backend has exited, a moment after the socket closed, and until then another
        replica's relay would find the lock taken (a test saw that, now and then)."""
        # Each step runs even if one before it failed, in the reverse order of registration: mark,
        # release the lock, forget the connection, close it, close the producer.
        with contextlib.ExitStack() as closing:
            closing.callback(self._producer.close, timeout=self._publish_timeout_ms / 1000)
            if self._connection is not None:
                closing.callback(self._connection.close)
            closing.callback(self._forget_connection)
            if self._holds_lock:
                closing.callback(self._release_lock_quietly)
            closing.callback(self._forget_feed)
            self._mark_unmarked()

    def _forget_feed(self) -> None:
        with _OFFERS_LOCK:
            if self._feed is not None and _FEEDS.get(self._engine) is self._feed:
                del _FEEDS[self._engine]
        self._feed = None

    def _forget_connection(self) -> None:
        self._connection, self._holds_lock = None, False

    def _release_lock_quietly(self) -> None:
        with contextlib.suppress(sqlalchemy.exc.DBAPIError):  # a lost session holds no lock
            self._release_lock()

    def __enter__(self) -> OutboxRelay:
        return self

    def __exit__(self, *_exception_info: object) -> None:
        self.close()

    def _read_unsent(
        self, executor: Session | sqlalchemy.Connection, after_id: int = 0
    ) -> list[OutboxMessage]:
        """The lowest unsent rows with ids above `after_id` (published, not marked yet: SQLite)."""
        return [
            OutboxMessage(
                id=row.id,
                topic=row.topic,
                message_key=row.message_key,
                message_value=bytes(row.message_value),
                event_id=row.event_id,
            )
            for row in executor.execute(_READ_UNSENT, {"batch_size": self._batch_size, "after_id": after_id})
        ]

    def _publish(self, messages: Sequence[OutboxMessage]) -> None:
        """Send the batch and wait until Kafka acknowledged every message, or raise."""
        futures = [
            self._producer.send(
                message.topic,
                key=message.message_key.encode(),
                value=message.message_value,
            )
            for message in messages
        ]
        self._producer.flush(timeout=self._publish_timeout_ms / 1000)
        for future in futures:
            # Raises the send's error (e.g. KafkaTimeoutError): nothing is marked, all re-sent later.
            future.get(timeout=self._publish_timeout_ms / 1000)
        self._rounds.inc()
        if self._before_mark_sent is not None:
            self._before_mark_sent(messages)

    def _mark_sent(
        self,
        connection: sqlalchemy.Connection,
        statement: sqlalchemy.Update,
        ids: Mapping[str, object],
        count: int,
    ) -> None:
        """Mark the `count` published rows `ids` names sent (PostgreSQL: their ids, as writers'
        ids interleave; SQLite: their range, `_mark_unmarked`)."""
        sent_at: datetime.datetime = self._clock()
        result = connection.execute(statement, {**ids, "marked_at": sent_at})
        # Under PostgreSQL we hold the relay lock: nobody else can have marked them in between.
        # Under SQLite there is one relay, but a closed one's offered mark may still be carried
        # by a writer (`_withdraw_an_ownerless_offer`): some of the rows may be marked already.
        assert 0 <= result.rowcount <= count, (result.rowcount, count)
        logger.debug("outbox batch published", extra={"message_count": count})


# Statements built once: SQLAlchemy memoizes a statement's cache key on the object, so one built
# per round paid for building it and its key every time (a tenth of matchmaking's CPU went to
# its relay).
_READ_UNSENT = (
    sqlalchemy.select(
        outbox_messages.c.id,
        outbox_messages.c.topic,
        outbox_messages.c.message_key,
        outbox_messages.c.message_value,
        outbox_messages.c.event_id,
    )
    .where(outbox_messages.c.sent_at.is_(None), outbox_messages.c.id > sqlalchemy.bindparam("after_id"))
    .order_by(outbox_messages.c.id)
    .limit(sqlalchemy.bindparam("batch_size"))
)
_MARK_SENT_RANGE = (
    outbox_messages.update()
    .where(outbox_messages.c.id.between(sqlalchemy.bindparam("first_id"), sqlalchemy.bindparam("last_id")))
    .where(outbox_messages.c.sent_at.is_(None))
    .values(sent_at=sqlalchemy.bindparam("marked_at"))
)
_MARK_SENT_POSTGRESQL = (
    outbox_messages.update()
    .where(one_of(outbox_messages.c.id, "ids", "postgresql"))
    .where(outbox_messages.c.sent_at.is_(None))
    .values(sent_at=sqlalchemy.bindparam("marked_at"))
)
