"""Alembic run from code: the example history builds the platform tables on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime
import pathlib
import threading

import pytest
import sqlalchemy
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
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
