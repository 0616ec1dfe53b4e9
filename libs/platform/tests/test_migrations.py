"""Alembic run from code: the example history builds the platform tables on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime
import pathlib
import threading
import time
from typing import Any

import pytest
import sqlalchemy
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from mahjong_platform import migrations
from mahjong_platform.database import create_engine_for
from mahjong_platform.migrations import current_revision, downgrade, upgrade
from mahjong_platform.schema import outbox_messages, platform_metadata

PLATFORM_TABLES = {
    "stored_events",
    "outbox_messages",
    "consumer_positions",
    "processed_events",
    "dead_letter_redrives",
}


def table_names(database_url: str) -> set[str]:
    engine = create_engine_for(database_url)
    try:
        return set(sqlalchemy.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_creates_the_platform_and_service_tables_and_is_idempotent(
    database_url: str, alembic_example_directory: pathlib.Path
) -> None:
    assert current_revision(database_url) is None
    upgrade(database_url, alembic_example_directory)
    upgrade(database_url, alembic_example_directory)
    assert current_revision(database_url) == "0005"
    assert table_names(database_url) == PLATFORM_TABLES | {"example_projection", "alembic_version"}


def test_the_migrated_platform_tables_match_the_runtime_table_definitions(
    database_url: str, alembic_example_directory: pathlib.Path
) -> None:
    """The frozen migration and `platform_metadata` must describe the same schema."""
    upgrade(database_url, alembic_example_directory)
    engine = create_engine_for(database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            differences = compare_metadata(context, platform_metadata)
    finally:
        engine.dispose()
    # Tables the platform metadata does not know (the service's own and alembic's) are expected.
    unexpected = [
        difference
        for difference in differences
        if not (
            isinstance(difference, tuple)
            and difference[0] == "remove_table"
            and difference[1].name in {"example_projection", "alembic_version"}
        )
    ]
    assert unexpected == []


def test_downgrade_to_base_removes_every_migrated_table(
    database_url: str, alembic_example_directory: pathlib.Path
) -> None:
    upgrade(database_url, alembic_example_directory)
    downgrade(database_url, alembic_example_directory, "base")
    assert current_revision(database_url) is None
    assert table_names(database_url) == {"alembic_version"}


def test_each_service_can_keep_its_own_version_table(
    database_url: str, alembic_example_directory: pathlib.Path
) -> None:
    upgrade(database_url, alembic_example_directory, version_table="example_service_version", revision="0001")
    assert current_revision(database_url, version_table="example_service_version") == "0001"
    assert current_revision(database_url) is None
    assert "alembic_version" not in table_names(database_url)
    assert "example_projection" not in table_names(database_url)


@pytest.mark.parametrize("revision", ["0001", "head"])
def test_upgrading_in_steps_equals_upgrading_at_once(
    sqlite_database_url: str, alembic_example_directory: pathlib.Path, revision: str
) -> None:
    upgrade(sqlite_database_url, alembic_example_directory, revision=revision)
    upgrade(sqlite_database_url, alembic_example_directory)
    assert current_revision(sqlite_database_url) == "0005"


@pytest.mark.integration
def test_replicas_migrating_one_postgresql_database_at_once_all_succeed(
    postgres_database_url: str, alembic_example_directory: pathlib.Path
) -> None:
    """Replicas start together and each migrates: the advisory lock makes them take turns."""
    errors: list[BaseException] = []

    def migrate() -> None:
        try:
            upgrade(postgres_database_url, alembic_example_directory)
        except BaseException as error:
            errors.append(error)

    replicas = [threading.Thread(target=migrate) for _ in range(3)]
    for replica in replicas:
        replica.start()
    for replica in replicas:
        replica.join()
    assert errors == []
    upgrade(postgres_database_url, alembic_example_directory)  # Already at the head: nothing to do.
    assert current_revision(postgres_database_url) is not None


def test_schema_version_4_keeps_the_outbox_and_allows_one_message_per_event_and_topic(
    database_url: str, alembic_example_directory: pathlib.Path
) -> None:
    """A deployed outbox (unsent rows included) migrates in place; afterwards an event may be queued
    for two topics (a seat release for the table and seats topics), never twice for one."""
    upgrade(database_url, alembic_example_directory, revision="0004")
    engine = create_engine_for(database_url)

    def message(event_id: str, topic: str) -> dict[str, object]:
        created = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        return {
            "topic": topic,
            "message_key": "t",
            "message_value": b"v",
            "event_id": event_id,
            "created_at": created,
        }

    try:
        with engine.begin() as connection:
            connection.execute(outbox_messages.insert(), [message("e1", "table"), message("e2", "table")])
            with pytest.raises(sqlalchemy.exc.IntegrityError), connection.begin_nested():  # one per event
                connection.execute(outbox_messages.insert(), [message("e1", "seats")])
        upgrade(database_url, alembic_example_directory)
        with engine.begin() as connection:
            connection.execute(outbox_messages.insert(), [message("e1", "seats")])
            with pytest.raises(sqlalchemy.exc.IntegrityError), connection.begin_nested():
                connection.execute(outbox_messages.insert(), [message("e2", "table")])
            rows = connection.execute(
                sqlalchemy.select(
                    outbox_messages.c.event_id, outbox_messages.c.topic, outbox_messages.c.sent_at
                ).order_by(outbox_messages.c.id)
            ).all()
        assert [tuple(row) for row in rows] == [
            ("e1", "table", None),
            ("e2", "table", None),
            ("e1", "seats", None),
        ]
        with engine.begin() as connection:
            connection.execute(outbox_messages.delete().where(outbox_messages.c.topic == "seats"))
        downgrade(database_url, alembic_example_directory, "0004")
        with engine.begin() as connection, pytest.raises(sqlalchemy.exc.IntegrityError):
            connection.execute(outbox_messages.insert(), [message("e1", "seats")])
    finally:
        engine.dispose()


# Each index built CONCURRENTLY on PostgreSQL: (the revision that builds it, the one before, its
# name, its table and columns).
CONCURRENT_INDEXES = [
    ("0003", "0002", "ix_outbox_messages_sent_at", "outbox_messages (sent_at)"),
    ("0005", "0004", "uq_outbox_messages_event_id_topic", "outbox_messages (event_id, topic)"),
]


def index_is_valid(engine: sqlalchemy.Engine, name: str) -> bool | None:
    with engine.connect() as connection:
        valid: bool | None = connection.execute(
            sqlalchemy.text("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(:name)"),
            {"name": name},
        ).scalar()
        return valid


@pytest.mark.integration
@pytest.mark.parametrize(("revision", "previous", "index", "definition"), CONCURRENT_INDEXES)
def test_an_upgrade_rebuilds_an_invalid_index_a_failed_concurrent_build_left(
    postgres_database_url: str,
    alembic_example_directory: pathlib.Path,
    revision: str,
    previous: str,
    index: str,
    definition: str,
) -> None:
    """A cancelled CREATE INDEX CONCURRENTLY leaves an INVALID index of that name; the next upgrade
    must drop and build it again (it failed with "already exists", and the service never started)."""
    upgrade(postgres_database_url, alembic_example_directory, revision=previous)
    engine = create_engine_for(postgres_database_url)
    try:
        with engine.begin() as connection:  # What a cancelled build leaves (the server marks it so).
            connection.execute(sqlalchemy.text(f"CREATE INDEX {index} ON {definition}"))
            connection.execute(
                sqlalchemy.text(
                    "UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass(:name)"
                ),
                {"name": index},
            )
        assert index_is_valid(engine, index) is False
        upgrade(postgres_database_url, alembic_example_directory)
        assert current_revision(postgres_database_url) == "0005"
        assert index_is_valid(engine, index) is True
    finally:
        engine.dispose()


@pytest.mark.integration
@pytest.mark.parametrize(("revision", "previous", "index", "definition"), CONCURRENT_INDEXES)
def test_a_concurrent_index_build_is_not_cut_short_by_the_engines_statement_timeout(
    postgres_database_url: str,
    alembic_example_directory: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    revision: str,
    previous: str,
    index: str,
    definition: str,
) -> None:
    """A build that takes longer than the engine's statement timeout (a large outbox) completes, and
    the timeout is back on the connection afterwards.

    The build is made long without a large table: CONCURRENTLY waits for a transaction that writes
    the table, which is held open for several statement timeouts after the build is seen waiting.
    """
    upgrade(postgres_database_url, alembic_example_directory, revision=previous)
    timeout_ms = 300
    returned_timeouts: list[str] = []  # Each connection's statement timeout as it went back to its pool.

    def record_timeout(dbapi_connection: Any, _record: Any) -> None:
        if dbapi_connection is not None:
            with dbapi_connection.cursor() as cursor:
                cursor.execute("SHOW statement_timeout")
                returned_timeouts.append(cursor.fetchone()[0])

    def short_timeout_engine(url: str) -> sqlalchemy.Engine:
        short_timeout = create_engine_for(url, postgresql_statement_timeout_ms=timeout_ms)
        sqlalchemy.event.listen(short_timeout, "checkin", record_timeout)
        return short_timeout

    monkeypatch.setattr(migrations, "create_engine_for", short_timeout_engine)
    engine = create_engine_for(postgres_database_url)
    errors: list[BaseException] = []

    def migrate() -> None:
        try:
            upgrade(postgres_database_url, alembic_example_directory, revision=revision)
        except BaseException as error:
            errors.append(error)

    try:
        with engine.connect() as writer:
            writer.execute(outbox_messages.delete())  # Takes the table's ROW EXCLUSIVE lock, held open.
            migration = threading.Thread(target=migrate)
            migration.start()
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as observer:
                while not observer.execute(
                    sqlalchemy.text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND wait_event_type = 'Lock' AND query ILIKE 'CREATE %INDEX CONCURRENTLY%'"
                    )
                ).scalar_one():
                    assert migration.is_alive(), errors
                    time.sleep(0.05)
            time.sleep(10 * timeout_ms / 1000)  # The build waits well past the engine's timeout.
            writer.rollback()
        migration.join()
        assert errors == []
        assert current_revision(postgres_database_url) == revision
        assert index_is_valid(engine, index) is True
        assert returned_timeouts != []
        assert set(returned_timeouts) == {f"{timeout_ms}ms"}
    finally:
        engine.dispose()
