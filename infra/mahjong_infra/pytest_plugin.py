"""pytest fixtures for integration tests against a real Kafka broker and a real PostgreSQL.

Registered for the whole repository by the root `conftest.py`. Servers start lazily: a session
that never asks for `kafka_broker` or `postgres_cluster` starts nothing and stays fast. A missing
server is a failure with a message naming what to install, never a skip: a skipped integration
test is a test that silently stopped testing.

Fixtures:
- `kafka_broker` (session): one KRaft broker on free ports; `.bootstrap_servers`, `.version`.
- `kafka_bootstrap_servers` (session): the same broker's "host:port".
- `postgres_cluster` (session): one throwaway cluster; `.url(db)`, `.create_database(name)`.
- `postgres_database_url` (function): a fresh, empty database for this test; its SQLAlchemy URL.
- `postgres_database_factory` (function): call it for more fresh databases (e.g. one per service).
- `unique_prefix` (function): a prefix for topic names and group ids no other test shares.

When a test that used `unique_prefix` fails, the terminal summary prints the broker's log lines that
name its prefix (its topics' partitions, its groups' rebalances): CI keeps the output, not the log.
"""

from __future__ import annotations

import atexit
import os
import pathlib
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from mahjong_infra import kafka as kafka_infra
from mahjong_infra import postgres as postgres_infra


@dataclass
class _UsedServers:
    """What this session really ran against, for the terminal summary."""

    kafka: str | None = None
    postgres: str | None = None
    start_seconds: dict[str, float] = field(default_factory=dict)
    broker_log: pathlib.Path | None = None
    prefixes: dict[str, str] = field(default_factory=dict)
    """Each test's `unique_prefix` by node id: the broker's lines about a failed test's groups."""


_USED_SERVERS_KEY = pytest.StashKey[_UsedServers]()


def pytest_configure(config: pytest.Config) -> None:
    """Tests run as on a developer's machine: services started by a test (and the subprocesses it
    runs) may use the public development JWT secret (`check_secret_for_serving`)."""
    os.environ.setdefault("MAHJONG_ENV", "development")


MAX_PREFIX_NAME_LENGTH = 60


def _used_servers(config: pytest.Config) -> _UsedServers:
    if _USED_SERVERS_KEY not in config.stash:
        config.stash[_USED_SERVERS_KEY] = _UsedServers()
    return config.stash[_USED_SERVERS_KEY]


# --- reporting ----------------------------------------------------------------------------------


def pytest_report_header(config: pytest.Config) -> list[str]:
    """What the integration tests will run against (cheap: nothing is started here)."""
    lines = []
    try:
        pinned = kafka_infra.pinned_version()
        fetched = (kafka_infra.libs_dir(pinned) / kafka_infra.CACHE_COMPLETE_MARKER).exists()
        state = "jars cached" if fetched else "jars fetched on first use"
        lines.append(
            f"kafka: {pinned} pinned ({state}; a real broker starts if an integration test needs it)"
        )
    except kafka_infra.KafkaInfraError as error:
        lines.append(f"kafka: unavailable ({error})")
    try:
        lines.append(f"postgresql: {postgres_infra.version()} ({postgres_infra.find_bindir()})")
    except postgres_infra.PostgresInfraError as error:
        lines.append(f"postgresql: NOT FOUND ({error})")
    return lines


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """The real servers this session ran against, printed at the end where CI logs show them, then
    for each failed test that used `unique_prefix` the broker's lines naming its topics and groups."""
    used = _used_servers(config)
    if used.kafka is None and used.postgres is None:
        return
    terminalreporter.section("real servers used")
    for line in (used.kafka, used.postgres):
        if line is not None:
            terminalreporter.write_line(line)
    if used.broker_log is None or not used.broker_log.exists():
        return
    for report in terminalreporter.stats.get("failed", []) + terminalreporter.stats.get("error", []):
        prefix = used.prefixes.get(getattr(report, "nodeid", ""))
        if prefix is None:
            continue
        terminalreporter.section(f"broker log of {report.nodeid}")
        for line in broker_lines_mentioning(used.broker_log, prefix):
            terminalreporter.write_line(line)


BROKER_LINES_PER_FAILED_TEST = 200
"""At most this many of the broker's lines naming a failed test's topics and groups are printed
(the last ones): a CI machine is gone after its run, and with it the broker's log."""


def broker_lines_mentioning(
    log_path: pathlib.Path, text: str, limit: int = BROKER_LINES_PER_FAILED_TEST
) -> list[str]:
    """The last ``limit`` lines of the broker log at ``log_path`` that contain ``text`` (a test's
    `unique_prefix`, which its topics and consumer group ids start with), then a line saying how
    many earlier ones were left out, if any."""
    matching: list[str] = []
    with log_path.open(encoding="utf-8", errors="replace") as log:
        matching = [line.rstrip("\n") for line in log if text in line]
    if len(matching) <= limit:
        return matching
    return [f"({len(matching) - limit} earlier lines left out)", *matching[-limit:]]


# --- Kafka --------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kafka_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[kafka_infra.KafkaBroker]:
    """One real Kafka broker for the whole session, on free ports; stopped at the end."""
    started = time.monotonic()
    failure: str | None = None
    broker = kafka_infra.KafkaBroker.on_free_ports(tmp_path_factory.mktemp("kafka"))
    atexit.register(broker.stop)  # even if the session dies without running finalizers
    try:
        kafka_infra.fetch()
        broker.start(die_with_parent=True)
    except kafka_infra.KafkaInfraError as error:
        failure = str(error)
    if failure is not None:  # failed outside the except block: no "during handling" chain
        pytest.fail(
            f"cannot start the real Kafka broker the integration tests need: {failure}\n"
            "Prerequisites: Java 17+ and Maven (Debian: apt-get install -y openjdk-17-jre-headless maven).",
            pytrace=False,
        )
    elapsed = time.monotonic() - started
    _used_servers(request.config).kafka = (
        f"kafka: {broker.version} (real broker at {broker.bootstrap_servers}, started in {elapsed:.1f} s; "
        f"log {broker.server_log_path})"
    )
    _used_servers(request.config).broker_log = pathlib.Path(broker.server_log_path)
    try:
        yield broker
    finally:
        broker.stop()
        atexit.unregister(broker.stop)


@pytest.fixture(scope="session")
def kafka_bootstrap_servers(kafka_broker: kafka_infra.KafkaBroker) -> str:
    """The session broker's bootstrap address, "127.0.0.1:<port>"."""
    return kafka_broker.bootstrap_servers


@pytest.fixture
def unique_prefix(request: pytest.FixtureRequest) -> str:
    """A short, unique, topic-safe prefix for this test: "t.<test name>.<8 hex>." .

    Tests share one broker; prefixing topics and consumer group ids keeps them from seeing each
    other's messages. Kafka topic names allow [a-zA-Z0-9._-], up to 249 characters.
    """
    name = re.sub(r"[^a-zA-Z0-9_-]+", "_", request.node.name).strip("_")[:MAX_PREFIX_NAME_LENGTH]
    prefix = f"t.{name}.{uuid.uuid4().hex[:8]}."
    _used_servers(request.config).prefixes[request.node.nodeid] = prefix
    return prefix


# --- PostgreSQL ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_cluster(request: pytest.FixtureRequest) -> Iterator[postgres_infra.PostgresCluster]:
    """One throwaway PostgreSQL cluster for the whole session; stopped and deleted at the end."""
    started = time.monotonic()
    failure: str | None = None
    cluster = postgres_infra.PostgresCluster()
    atexit.register(cluster.stop)
    try:
        cluster.start()
    except postgres_infra.PostgresInfraError as error:
        failure = str(error)
    if failure is not None:
        pytest.fail(
            f"cannot start the real PostgreSQL the integration tests need: {failure}\n"
            f"Prerequisites: {postgres_infra.INSTALL_HINT}.",
            pytrace=False,
        )
    elapsed = time.monotonic() - started
    _used_servers(request.config).postgres = (
        f"postgresql: {cluster.version} (real server at {cluster.host}:{cluster.port}, "
        f"started in {elapsed:.1f} s)"
    )
    try:
        yield cluster
    finally:
        cluster.stop()
        atexit.unregister(cluster.stop)


@pytest.fixture
def postgres_database_factory(
    request: pytest.FixtureRequest, postgres_cluster: postgres_infra.PostgresCluster
) -> Iterator[Callable[[str], str]]:
    """`create(hint) -> url`: fresh databases for this test, dropped when the test ends."""
    created: list[str] = []

    def create(hint: str = "") -> str:
        test_name = re.sub(r"\W+", "_", request.node.name)[:30]
        # The random part first: database_name() truncates at 63 characters.
        name = postgres_infra.database_name(f"t_{uuid.uuid4().hex[:8]}_{test_name}_{hint}")
        url = postgres_cluster.create_database(name)
        created.append(name)
        return url

    yield create
    for name in created:
        postgres_cluster.drop_database(name)


@pytest.fixture
def postgres_database_url(postgres_database_factory: Callable[[str], str]) -> str:
    """A fresh, empty PostgreSQL database for this test: `postgresql+psycopg://...` for SQLAlchemy."""
    return postgres_database_factory("")


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.integration),
    ]
)
def database_url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    """A fresh empty database, once per backend (the same contract must hold on both): a SQLite
    file in this test's data directory (not created yet), then the real PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{(tmp_path / 'data').resolve() / 'test.sqlite3'}"
    url: str = request.getfixturevalue("postgres_database_url")
    return url
