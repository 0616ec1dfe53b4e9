"""One way to run a service process: migrate, create topics, relay the outbox, consume, serve gRPC.

Every service's ``__main__`` describes itself as a `ServiceDefinition` (its database migrations, its
gRPC services, its consumers) and calls `run_service`. The background workers (outbox relay,
tracked consumers) run in threads under a supervisor that restarts a crashed worker after a pause:
the worker's state lives in the database and Kafka positions, so a restart resumes exactly where
the crash left off (ARCHITECTURE.md "Reading events").
"""

from __future__ import annotations

import dataclasses
import datetime
import gc
import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Final, Protocol

import grpc
from sqlalchemy import Engine

from mahjong_platform.aio_grpc_server import (
    AioAuthInterceptor,
    AioCallerLimitInterceptor,
    AioRunningServer,
    serve_aio,
)
from mahjong_platform.auth import AuthInterceptor
from mahjong_platform.config import ServiceName, Settings, check_secret_for_serving
from mahjong_platform.database import create_engine_for
from mahjong_platform.dead_letter_service import METHOD_ROLES as DEAD_LETTER_METHOD_ROLES
from mahjong_platform.dead_letter_service import DeadLetterRedriver, RedriveTarget, one_event_handler
from mahjong_platform.dead_letter_service import registration as dead_letter_registration
from mahjong_platform.errors import ErrorMapping
from mahjong_platform.grpc_server import RunningServer, ServiceRegistration, serve
from mahjong_platform.limits import CallerLimiter, CallerLimitInterceptor
from mahjong_platform.metrics import (
    DatabaseGauge,
    MetricsServer,
    ServiceMetrics,
    bind_engine,
    outbox_gauges,
    serve_metrics,
)
from mahjong_platform.migrations import upgrade
from mahjong_platform.outbox import OutboxRelay
from mahjong_platform.retention import RetentionWorker
from mahjong_platform.rpc_metrics import AioRpcMetricsInterceptor, RpcMetricsInterceptor
from mahjong_platform.topics import Topics, ensure_topics
from mahjong_platform.tracked_consumer import (
    AssignmentHook,
    BatchHandler,
    Handler,
    Relevance,
    TrackedConsumer,
)

logger = logging.getLogger(__name__)

WORKER_RESTART_PAUSE_SECONDS = 2.0
WORKER_STOP_TIMEOUT_SECONDS = 15.0
WORKER_STALL_SECONDS = 45.0
"""A worker that reports its progress (`stalled_seconds`) and made none for this long is abandoned
and replaced: a Kafka client that stopped polling has long left its group (session 10 s)."""
WORKER_WATCH_INTERVAL_SECONDS = 1.0
HEALTH_READY_POLL_SECONDS = 0.1


class Worker(Protocol):
    """A background loop: runs until the event is set, and releases its resources on close."""

    def run_forever(self, stop_event: threading.Event) -> None: ...

    def close(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class ConsumerDefinition:
    """A tracked consumer the service runs: its group, what it reads, and how it applies events."""

    group_id: str
    topics: Callable[[Topics], Sequence[str]]
    handler: Handler | None
    # The events the handler applies; None = all of them (see `TrackedConsumer`'s `wants`).
    wants: Relevance | None = None
    # Set-based alternative to `handler`: the whole poll batch in one call (give one of them).
    batch_handler: BatchHandler | None = None
    # Told each partition assignment of the group (`TrackedConsumer`'s `on_assignment`).
    on_assignment: AssignmentHook | None = None
    # Milliseconds the fetch after a poll that brought records waits at the broker for more, so
    # that batches grow (`TrackedConsumer`'s `linger_ms`); adds at most that to the consumer's lag.
    linger_ms: int = 0
    # The handler skips re-sent events by its own keys: no `processed_events` rows (see
    # `TrackedConsumer`'s `idempotent_handler`).
    idempotent_handler: bool = False
    # The Kafka consumer group, when not `group_id` (`TrackedConsumer`'s `kafka_group_id`).
    kafka_group_id: str | None = None


@dataclasses.dataclass(frozen=True)
class ServiceDefinition:
    """What a service process is made of; `run_service` does the rest."""

    name: ServiceName
    # alembic "package:folder" form, e.g. "mahjong_ledger:alembic".
    migrations: str
    registrations: Callable[[Engine, Settings, Topics], Sequence[ServiceRegistration]]
    method_roles: Mapping[str, Collection[str]] = dataclasses.field(default_factory=dict)
    consumers: Callable[[Engine, Settings, Topics], Sequence[ConsumerDefinition]] = lambda *_: ()
    relays_outbox: bool = True
    extra_workers: Callable[[Engine, Settings, Topics], Sequence[tuple[str, Callable[[], Worker]]]] = (
        lambda *_: ()
    )
    # Exception types of the service's domain and the status codes they map to.
    error_mapping: ErrorMapping = dataclasses.field(default_factory=dict)
    # Serve asyncio servicers on `grpc.aio` (`aio_grpc_server`) instead of the thread pool.
    asyncio_server: bool = False
    # Adds the service's own metrics (counters, observers, database gauges) to its `ServiceMetrics`.
    instrument: Callable[[ServiceMetrics, Engine], None] = lambda *_: None
    # asyncio servers: interceptors run inside authentication and the caller limits (the table
    # engine's routing of a call to the replica that owns its table).
    extra_interceptors: Callable[[], Sequence[grpc.aio.ServerInterceptor]] = lambda: ()
    # asyncio servers: set once the process can serve (asked after the registrations); until then
    # its health says NOT_SERVING, so a load balancer sends it nothing (a table engine before its
    # first partition assignment knows no table's owner). None: SERVING from the start.
    serving_when: Callable[[], threading.Event] | None = None


def served_method_roles(definition: ServiceDefinition) -> dict[str, frozenset[str]]:
    """The role table a process of ``definition`` serves with: its own service's, and the
    ``DeadLetterService`` every process serves for its consumer groups (ops only)."""
    return {
        **{method: frozenset(roles) for method, roles in definition.method_roles.items()},
        **DEAD_LETTER_METHOD_ROLES,
    }


def migrate(definition: ServiceDefinition, database_url: str) -> None:
    """Bring the service's database to the newest revision of its own migration history."""
    upgrade(database_url, definition.migrations, version_table=f"alembic_version_{definition.name}")


class SupervisedWorker:
    """Runs a worker in a thread; when it crashes, logs, closes it, pauses and starts a fresh one.

    A worker with a `stalled_seconds()` method (the tracked consumers) is also watched: stuck for
    WORKER_STALL_SECONDS (a kafka-python client that stopped polling after a group join was seen
    on a loaded machine), it is told to stop and left to finish on its own, and a fresh one
    starts. Exactly-once does not depend on the old one being gone: positions and processed ids
    are stored with every projection change, so two consumers of one group never apply an event
    twice.
    """

    def __init__(self, name: str, create: Callable[[], Worker], stop_event: threading.Event) -> None:
        self.name = name
        self._create = create
        self._stop_event = stop_event
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_seconds: float) -> None:
        self._thread.join(timeout_seconds)

    def _run(self) -> None:
        while not self._stop_event.is_set():
            run = _WorkerRun(self.name, self._create)
            run.start()
            while not run.done.wait(WORKER_WATCH_INTERVAL_SECONDS):
                if self._stop_event.is_set():
                    run.stop.set()  # and wait for it to finish (the service's stop bounds the wait)
                elif run.stalled_seconds() > WORKER_STALL_SECONDS:
                    logger.error(
                        "worker %s made no progress for %.0f s; starting a fresh one",
                        self.name,
                        run.stalled_seconds(),
                    )
                    run.stop.set()
                    break
            if run.crashed:
                self._stop_event.wait(WORKER_RESTART_PAUSE_SECONDS)


class _WorkerRun:
    """One worker instance in its own daemon thread, with its own stop event."""

    def __init__(self, name: str, create: Callable[[], Worker]) -> None:
        self.name = name
        self._create = create
        self.stop = threading.Event()
        self.done = threading.Event()
        self.crashed = False
        self._worker: Worker | None = None
        self._thread = threading.Thread(target=self._body, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stalled_seconds(self) -> float:
        """How long the worker has made no progress; 0 for a worker that does not say."""
        stalled = getattr(self._worker, "stalled_seconds", None)
        return float(stalled()) if callable(stalled) else 0.0

    def _body(self) -> None:
        worker: Worker | None = None
        try:
            worker = self._create()
            self._worker = worker
            worker.run_forever(self.stop)
        except Exception:
            logger.exception("worker %s crashed; restarting", self.name)
            self.crashed = True
        finally:
            if worker is not None:
                try:
                    worker.close()
                except Exception:
                    logger.exception("closing worker %s failed", self.name)
            self.done.set()


@dataclasses.dataclass
class RunningService:
    """A started service process: its gRPC server, its workers, and how to stop them all."""

    definition: ServiceDefinition
    engine: Engine
    server: RunningServer | AioRunningServer
    workers: list[SupervisedWorker]
    stop_event: threading.Event
    metrics: ServiceMetrics
    metrics_server: MetricsServer

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def metrics_port(self) -> int:
        """The port of the service's Prometheus ``/metrics`` endpoint."""
        return self.metrics_server.port

    def stop(self, grace_seconds: float | None = None) -> None:
        """Stop serving (gracefully), stop the workers, release the database."""
        self.server.stop(grace_seconds)
        self.stop_event.set()
        for worker in self.workers:
            worker.join(WORKER_STOP_TIMEOUT_SECONDS)
        self.metrics_server.stop()
        self.engine.dispose()


def start_service(
    definition: ServiceDefinition,
    settings: Settings,
    *,
    address: str | None = None,
    metrics_address: str | None = None,
) -> RunningService:
    """Migrate, ensure topics, start the workers, the metrics endpoint and the gRPC server; return
    once it serves.

    ``address`` and ``metrics_address`` override the settings' listen addresses. A caller that
    overrides ``address`` alone (a test, an embedded server) gets its metrics on a free port of the
    same host (see `RunningService.metrics_port`), so two such processes never collide.

    Raises `ConfigurationError` first when the JWT secret is unfit for serving (see
    `check_secret_for_serving`).
    """
    check_secret_for_serving(settings)
    database_url = settings.database_url(definition.name)
    migrate(definition, database_url)
    topics = Topics.with_prefix(settings.topic_prefix)
    bootstrap_servers = list(settings.kafka_bootstrap_servers)
    ensure_topics(bootstrap_servers, topics.all_names(), partitions=settings.topic_partitions)
    engine = create_engine_for(database_url)
    metrics = ServiceMetrics(definition.name)
    bind_engine(engine, metrics)
    metrics.add_collector(DatabaseGauge(engine, outbox_gauges()))
    definition.instrument(metrics, engine)
    if metrics_address is None:
        metrics_address = (
            settings.metrics_address(definition.name)
            if address is None
            else f"{address.rpartition(':')[0]}:0"
        )
    metrics_server = serve_metrics(metrics, metrics_address)
    stop_event = threading.Event()
    workers: list[SupervisedWorker] = []
    if definition.relays_outbox:
        workers.append(
            SupervisedWorker(
                f"{definition.name}-outbox-relay",
                lambda: OutboxRelay(engine, bootstrap_servers, client_id=f"{definition.name}-relay"),
                stop_event,
            )
        )
    consumers = definition.consumers(engine, settings, topics)
    for consumer in consumers:
        workers.append(
            SupervisedWorker(
                f"{definition.name}-consumer-{consumer.group_id}",
                _consumer_factory(engine, bootstrap_servers, consumer, topics),
                stop_event,
            )
        )
    if settings.retention_hours:
        retention = datetime.timedelta(hours=settings.retention_hours)
        workers.append(
            SupervisedWorker(
                f"{definition.name}-retention", lambda: RetentionWorker(engine, retention), stop_event
            )
        )
    for name, create in definition.extra_workers(engine, settings, topics):
        workers.append(SupervisedWorker(f"{definition.name}-{name}", create, stop_event))
    for worker in workers:
        worker.start()
    limiter = caller_limiter(settings)
    sweeper = threading.Thread(
        target=limiter.run_sweeper, args=(stop_event,), name=f"{definition.name}-idle-streams", daemon=True
    )
    sweeper.start()
    redriver = DeadLetterRedriver(
        engine,
        bootstrap_servers,
        topics.dead_letter,
        [
            RedriveTarget(
                consumer.group_id, one_event_handler(consumer.handler, consumer.batch_handler), consumer.wants
            )
            for consumer in consumers
        ],
    )
    registrations = [
        *definition.registrations(engine, settings, topics),
        dead_letter_registration(redriver, asyncio_server=definition.asyncio_server),
    ]
    method_roles = served_method_roles(definition)
    server: RunningServer | AioRunningServer
    if definition.asyncio_server:
        server = serve_aio(
            registrations,
            address or settings.grpc_address(definition.name),
            settings,
            interceptors=[
                AioAuthInterceptor(settings.jwt_secret, method_roles=method_roles),
                AioCallerLimitInterceptor(limiter),
                *definition.extra_interceptors(),
            ],
            extra_error_mapping=definition.error_mapping,
            outermost_interceptors=[AioRpcMetricsInterceptor(metrics)],
            serving=definition.serving_when is None,
        )
        if definition.serving_when is not None:
            threading.Thread(
                target=_report_serving_when,
                args=(server, definition.serving_when(), stop_event),
                name=f"{definition.name}-health",
                daemon=True,
            ).start()
        return RunningService(definition, engine, server, workers, stop_event, metrics, metrics_server)
    assert definition.serving_when is None, "serving_when is for asyncio servers"
    interceptors: list[grpc.ServerInterceptor] = [
        AuthInterceptor(settings.jwt_secret, method_roles=method_roles),
        CallerLimitInterceptor(limiter),
    ]
    server = serve(
        registrations,
        address or settings.grpc_address(definition.name),
        settings,
        interceptors=interceptors,
        extra_error_mapping=definition.error_mapping,
        outermost_interceptors=[RpcMetricsInterceptor(metrics)],
    )
    return RunningService(definition, engine, server, workers, stop_event, metrics, metrics_server)


def _report_serving_when(
    server: AioRunningServer, ready: threading.Event, stop_event: threading.Event
) -> None:
    """Report the server and its services SERVING once `ready` is set, unless it is stopping."""
    while not ready.wait(HEALTH_READY_POLL_SECONDS):
        if stop_event.is_set():
            return
    try:
        # The whole server last: a client that sees it SERVING finds every service SERVING.
        for service_name in (*server.service_names, ""):
            server.set_serving(service_name, True)  # ignored once a graceful shutdown began
    except RuntimeError:  # the server's event loop is gone: it stopped
        pass


def caller_limiter(settings: Settings) -> CallerLimiter:
    """The per-caller limits of ``settings``: streams of all callers together may take three quarters
    of the workers, so that unary calls always find one."""
    return CallerLimiter(
        streams_per_caller=settings.grpc_streams_per_caller,
        calls_per_caller=settings.grpc_calls_per_caller,
        total_streams=max(1, settings.grpc_max_workers * 3 // 4),
        stream_idle_seconds=float(settings.grpc_stream_idle_seconds),
    )


def _consumer_factory(
    engine: Engine, bootstrap_servers: list[str], consumer: ConsumerDefinition, topics: Topics
) -> Callable[[], Worker]:
    def create() -> Worker:
        return TrackedConsumer(
            engine,
            bootstrap_servers,
            consumer.group_id,
            list(consumer.topics(topics)),
            consumer.handler,
            topics.dead_letter,
            batch_handler=consumer.batch_handler,
            wants=consumer.wants,
            on_assignment=consumer.on_assignment,
            linger_ms=consumer.linger_ms,
            idempotent_handler=consumer.idempotent_handler,
            kafka_group_id=consumer.kafka_group_id,
        )

    return create


GC_YOUNG_THRESHOLD: Final = 50_000
"""Allocations (net) between two collections of the youngest generation (CPython's default: 700)."""


def tune_garbage_collector() -> None:
    """Fewer, larger cyclic-GC passes for a serving process: what it allocated to start (modules,
    configuration, the server) is frozen out of every later collection, and the youngest
    generation is collected every `GC_YOUNG_THRESHOLD` allocations instead of CPython's 700.

    A busy service allocates short-lived objects by the million (messages, events, coroutines):
    with the default threshold those still alive at a collection (a message being sent, a
    command in flight) are promoted and then traversed again by every older collection, which
    took about a tenth of the table engine's busy time at saturation (py-spy --native, issue 10).
    Cycles are still collected, later; nothing here relies on a collection happening soon."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def run_service(definition: ServiceDefinition, settings: Settings) -> int:
    """`start_service`, then serve until SIGTERM/SIGINT; the body of every service's ``__main__``."""
    running = start_service(definition, settings)
    tune_garbage_collector()
    logger.info(
        "%s serving on port %d, metrics on port %d", definition.name, running.port, running.metrics_port
    )
    running.server.stop_on_signals()
    running.server.wait_for_termination()
    running.stop_event.set()
    for worker in running.workers:
        worker.join(WORKER_STOP_TIMEOUT_SECONDS)
    running.metrics_server.stop()
    running.engine.dispose()
    return 0
