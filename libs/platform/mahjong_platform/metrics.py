"""Prometheus metrics of a service process, served over HTTP at ``/metrics``.

Each service process owns one `ServiceMetrics`: its own registry (so services that share a Python
process, as in the integration tests, never mix their figures), the platform's metric families,
and the service's own ones (`counter`, `histogram`, `add_collector`). `start_service` creates it,
binds it to the service's database engine (`bind_engine`) and serves it on
``MAHJONG_<SERVICE>_METRICS_ADDRESS``. Code deep inside a service finds its process's metrics from
the database session it already holds (`metrics_for_session`), so no constructor had to change;
code running outside a service (unit tests, `mjctl rebuild`) gets `UNSCRAPED`, which nobody serves.

What is counted where, and at what cost:

- RPCs: `RpcMetricsInterceptor`, outermost in the gRPC harness, counts every call by method and
  final status code, times unary calls in a histogram (a stream's life is not a latency) and keeps
  the number of open streams per method. Labels are the method's short name and the code name:
  bounded sets, never a player or a table id.
- Events appended, postings and beans moved, settlement lag: counted after the transaction that
  wrote them commits (`after_commit`), so a rolled-back write counts nothing.
- Consumer lag per partition: set by the tracked consumer after each poll from what the fetch
  already told it (Kafka's high watermark minus the next offset to apply); no extra request.
- Outbox backlog and the oldest unsent message's age, open tables: read from the database when
  Prometheus scrapes (`DatabaseGauge`), one indexed query each per scrape, nothing per event.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeVar
from wsgiref.simple_server import WSGIServer

import sqlalchemy
from mahjong.v1 import envelope_pb2
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from mahjong_platform.envelopes import as_utc

logger = logging.getLogger(__name__)

# No `<name>_created` sample per series: nothing here reads them, and they double the page.
disable_created_metrics()  # type: ignore[no-untyped-call]

RPC_LATENCY_BUCKETS_SECONDS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
SETTLEMENT_LAG_BUCKETS_SECONDS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


_Family = TypeVar("_Family", Counter, Histogram)

EventObserver = Callable[[envelope_pb2.Envelope], None]
"""Told about one committed event (appended or applied); must be cheap and must not raise."""


class ServiceMetrics:
    """One service process's metrics: the platform's families and the service's own."""

    def __init__(self, service: str) -> None:
        self.service = service
        self.registry = CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        self._families: dict[str, Any] = {}
        self.appended_observers: list[EventObserver] = []
        self._appended_series: dict[str, Counter] = {}
        self.applied_observers: list[EventObserver] = []
        self.rpcs_handled = Counter(
            "mahjong_grpc_server_handled",
            "gRPC calls finished, by method and status code.",
            ["method", "code"],
            registry=self.registry,
        )
        self.rpc_seconds = Histogram(
            "mahjong_grpc_server_handling_seconds",
            "Time to answer a unary gRPC call, by method and status code (streams are not timed).",
            ["method", "code"],
            buckets=RPC_LATENCY_BUCKETS_SECONDS,
            registry=self.registry,
        )
        self.open_streams = Gauge(
            "mahjong_grpc_server_open_streams",
            "Server-streaming gRPC calls open now (Watch, WatchView, WatchTicket), by method.",
            ["method"],
            registry=self.registry,
        )
        self.events_appended = Counter(
            "mahjong_events_appended",
            "Events appended to this service's event store (committed), by event type.",
            ["event_type"],
            registry=self.registry,
        )
        self.outbox_published = Counter(
            "mahjong_outbox_published",
            "Outbox messages the relay published to Kafka and marked sent.",
            registry=self.registry,
        )
        self.outbox_rounds = Counter(
            "mahjong_outbox_rounds",
            "Relay rounds that sent outbox messages to Kafka (one flush and its acknowledgements "
            "each): messages per round is mahjong_outbox_published over this. Kafka's cost is "
            "mostly per round, not per message.",
            registry=self.registry,
        )
        self.consumer_events = Counter(
            "mahjong_consumer_events",
            "Events a tracked consumer handled, by consumer group and outcome "
            "(applied, duplicate: already applied before, dead_lettered).",
            ["consumer_group", "outcome"],
            registry=self.registry,
        )
        self.consumer_batches = Counter(
            "mahjong_consumer_batches",
            "Poll batches a tracked consumer applied events in (one transaction each, unless a "
            "failing event made it apply them one by one), by consumer group: events applied per "
            "batch is the ratio of the two counters.",
            ["consumer_group"],
            registry=self.registry,
        )
        self.dead_letters = Counter(
            "mahjong_consumer_dead_letters",
            "Messages a tracked consumer could not apply and published to the dead letter topic.",
            ["consumer_group"],
            registry=self.registry,
        )
        self.consumer_lag = Gauge(
            "mahjong_consumer_lag_messages",
            "Messages on a partition not yet handled by the consumer group (high watermark minus the "
            "next offset), as of the consumer's last poll.",
            ["consumer_group", "topic", "partition"],
            registry=self.registry,
        )

    def count_appended(self, event_type: str) -> None:
        """One more committed event of ``event_type`` (its series looked up once per type)."""
        series = self._appended_series.get(event_type)
        if series is None:
            series = self._appended_series[event_type] = self.events_appended.labels(event_type)
        series.inc()

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        """The service's own counter ``name`` (without ``_total``), created on first use."""
        return self._family(
            name, lambda: Counter(name, documentation, list(labels), registry=self.registry), Counter
        )

    def histogram(
        self, name: str, documentation: str, buckets: Sequence[float], labels: Sequence[str] = ()
    ) -> Histogram:
        """The service's own histogram ``name``, created on first use."""
        return self._family(
            name,
            lambda: Histogram(name, documentation, list(labels), buckets=buckets, registry=self.registry),
            Histogram,
        )

    def add_collector(self, collector: Collector) -> None:
        """Register a collector whose figures are computed when Prometheus scrapes."""
        self.registry.register(collector)

    def on_appended(self, observer: EventObserver) -> None:
        """Call ``observer`` with every event this service's event store appended, once committed."""
        self.appended_observers.append(observer)

    def on_applied(self, observer: EventObserver) -> None:
        """Call ``observer`` with every event a tracked consumer of this service applied, once
        committed (not for duplicates, not for dead letters)."""
        self.applied_observers.append(observer)

    def _family(self, name: str, create: Callable[[], _Family], kind: type[_Family]) -> _Family:
        with self._lock:
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = create()
        assert isinstance(family, kind), f"metric {name} already exists as a {type(family).__name__}"
        return family


UNSCRAPED: Final = ServiceMetrics("unscraped")
"""Where code running outside a service process counts: a registry nobody serves."""

_ENGINE_METRICS: weakref.WeakKeyDictionary[Engine, ServiceMetrics] = weakref.WeakKeyDictionary()


def bind_engine(engine: Engine, metrics: ServiceMetrics) -> None:
    """Make ``metrics`` the metrics of everything that runs on ``engine`` (the service's database)."""
    _ENGINE_METRICS[engine] = metrics


def metrics_for_engine(engine: Engine) -> ServiceMetrics:
    """The metrics of the service whose database ``engine`` is; `UNSCRAPED` outside a service."""
    return _ENGINE_METRICS.get(engine, UNSCRAPED)


def metrics_for_session(session: Session) -> ServiceMetrics:
    """The metrics of the service whose database ``session`` is bound to."""
    bind = session.get_bind()
    engine = bind if isinstance(bind, Engine) else bind.engine
    return metrics_for_engine(engine)


_AFTER_COMMIT_KEY: Final = "mahjong_metrics_after_commit"


def after_commit(session: Session, callback: Callable[[], None]) -> None:
    """Run ``callback`` once ``session``'s transaction commits; never if it rolls back."""
    session.info.setdefault(_AFTER_COMMIT_KEY, []).append(callback)


@sqlalchemy.event.listens_for(Session, "after_commit")
def _run_after_commit(session: Session) -> None:
    if session.in_nested_transaction():
        return
    for callback in session.info.pop(_AFTER_COMMIT_KEY, ()):
        try:
            callback()
        except Exception:  # A metric must never break a committed write.
            logger.exception("a metrics callback failed")


@sqlalchemy.event.listens_for(Session, "after_soft_rollback")
def _drop_after_commit(session: Session, previous_transaction: Any) -> None:
    if not previous_transaction.nested:
        session.info.pop(_AFTER_COMMIT_KEY, None)


def count_events_appended(
    session: Session, events: Sequence[envelope_pb2.Envelope], event_types: Sequence[str]
) -> None:
    """Count appended events of these types once the session commits, and tell the service's
    observers about them (the event store calls this)."""
    metrics = metrics_for_session(session)
    observers = metrics.appended_observers

    def count() -> None:
        for event_type in event_types:
            metrics.count_appended(event_type)
        for observer in observers:
            for event in events:
                observer(event)

    after_commit(session, count)


class ConsumerMetrics:
    """What a tracked consumer records: events handled by outcome, dead letters, lag per partition.

    The lag is Kafka's high watermark (from the consumer's last fetch response, no extra request)
    minus the next offset the group will handle (the stored position it seeked to, then the offset
    after the last message it handled). A partition whose high watermark the consumer has not yet
    seen has no lag figure yet.
    """

    def __init__(self, metrics: ServiceMetrics, group_id: str) -> None:
        self._group_id = group_id
        self._applied = metrics.consumer_events.labels(group_id, "applied")
        self._duplicates = metrics.consumer_events.labels(group_id, "duplicate")
        self._dead_lettered = metrics.consumer_events.labels(group_id, "dead_lettered")
        self._dead_letters = metrics.dead_letters.labels(group_id)
        self._batches = metrics.consumer_batches.labels(group_id)
        self._lag = metrics.consumer_lag
        self._observers = metrics.applied_observers
        self._next_offsets: dict[Any, int] = {}

    def handled(self, applied: int, duplicates: int) -> None:
        """Count a batch's events applied and duplicates skipped (call after it committed)."""
        if applied:
            self._applied.inc(applied)
            self._batches.inc()
        if duplicates:
            self._duplicates.inc(duplicates)

    def applied_event(self, envelope: envelope_pb2.Envelope) -> None:
        """One event applied and committed: tell the service's observers."""
        for observer in self._observers:
            observer(envelope)

    def dead_lettered(self) -> None:
        self._dead_lettered.inc()
        self._dead_letters.inc()

    def positions_reset(self, next_offsets: Mapping[Any, int]) -> None:
        """The consumer (re)starts these partitions (``TopicPartition``) at these offsets."""
        self._next_offsets.update(next_offsets)

    def polled(self, consumer: Any, batches: Mapping[Any, Sequence[Any]]) -> None:
        """After a poll's messages are handled: update each assigned partition's lag."""
        for partition, records in batches.items():
            if records:
                self._next_offsets[partition] = records[-1].offset + 1
        for partition in consumer.assignment():
            highwater = consumer.highwater(partition)
            next_offset = self._next_offsets.get(partition)
            if highwater is not None and next_offset is not None:
                self._lag.labels(self._group_id, partition.topic, str(partition.partition)).set(
                    max(0, highwater - next_offset)
                )

    def forget(self, partitions: Iterable[Any]) -> None:
        """Partitions this consumer no longer reads (revoked, or the consumer closed)."""
        for partition in list(partitions):
            self._next_offsets.pop(partition, None)
            with contextlib.suppress(KeyError):
                self._lag.remove(self._group_id, partition.topic, str(partition.partition))

    def forget_all(self) -> None:
        self.forget(list(self._next_offsets))


@dataclasses.dataclass(frozen=True)
class GaugeQuery:
    """One gauge read from the database at scrape time: ``query`` returns one row of one number."""

    name: str
    documentation: str
    query: sqlalchemy.Select[Any]
    convert: Callable[[Any], float] = float


class DatabaseGauge:
    """A collector that answers its gauges with one query each on the service's database per scrape.

    A failing query (the database is down) leaves its gauge out of that scrape and is logged, so
    the rest of the page still answers.
    """

    def __init__(self, engine: Engine, gauges: Sequence[GaugeQuery]) -> None:
        self._engine = engine
        self._gauges = tuple(gauges)

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(gauge.name, gauge.documentation) for gauge in self._gauges]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            with self._engine.connect() as connection:
                values = [connection.execute(gauge.query).scalar() for gauge in self._gauges]
        except SQLAlchemyError:
            logger.warning("metrics: reading the database gauges failed", exc_info=True)
            return
        for gauge, value in zip(self._gauges, values, strict=True):
            yield GaugeMetricFamily(gauge.name, gauge.documentation, value=float(gauge.convert(value)))


def outbox_gauges(clock: Callable[[], float] = time.time) -> list[GaugeQuery]:
    """The outbox backlog and the age of its oldest unsent message (0 when none waits)."""
    from mahjong_platform.schema import outbox_messages

    unsent = outbox_messages.c.sent_at.is_(None)

    def age_seconds(oldest: datetime.datetime | None) -> float:
        if oldest is None:
            return 0.0
        return max(0.0, clock() - as_utc(oldest).timestamp())

    return [
        GaugeQuery(
            "mahjong_outbox_unsent_messages",
            "Outbox messages written and not yet published to Kafka.",
            sqlalchemy.select(sqlalchemy.func.count()).select_from(outbox_messages).where(unsent),
        ),
        GaugeQuery(
            "mahjong_outbox_oldest_unsent_age_seconds",
            "Age of the oldest outbox message not yet published (0 when none waits).",
            sqlalchemy.select(sqlalchemy.func.min(outbox_messages.c.created_at)).where(unsent),
            age_seconds,
        ),
    ]


@dataclasses.dataclass
class MetricsServer:
    """The HTTP server answering ``/metrics`` for one registry."""

    httpd: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5.0)


def serve_metrics(metrics: ServiceMetrics, address: str) -> MetricsServer:
    """Serve ``metrics`` over HTTP on ``address`` (host:port, port 0 picks a free one)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        httpd, thread = start_http_server(int(port), addr=host, registry=metrics.registry)
    except OSError as error:
        raise OSError(f"cannot serve metrics on {address}: {error}") from error
    return MetricsServer(httpd, thread)
