"""Running a service's alembic migrations from code, without an alembic.ini.

Each service owns its migration history (a folder with `env.py` and `versions/`). At start-up and
in tests the service calls `upgrade(database_url, script_location)`; its `env.py` is two lines:

    from mahjong_platform.migrations import run_alembic_environment
    run_alembic_environment(target_metadata=my_service_metadata)

The platform's own tables are created by calling `mahjong_platform.schema.create_platform_tables`
from the service's first revision.
"""

from __future__ import annotations

import contextlib
import pathlib
import time
from collections.abc import Iterator, Sequence

import sqlalchemy
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import MetaData

from mahjong_platform.database import create_engine_for

DEFAULT_VERSION_TABLE = "alembic_version"
_DATABASE_URL_ATTRIBUTE = "mahjong_database_url"
_VERSION_TABLE_ATTRIBUTE = "mahjong_version_table"


def alembic_config(
    database_url: str,
    script_location: str | pathlib.Path,
    *,
    version_table: str = DEFAULT_VERSION_TABLE,
) -> Config:
    """An alembic `Config` built in code, for the `alembic.command` functions.

    `script_location` is a folder path or alembic's "package:folder" form. The database URL
    travels in `Config.attributes` rather than the ini options, so a password containing `%`
    needs no escaping.
    """
    config = Config()
    config.set_main_option("script_location", str(script_location).replace("%", "%%"))
    config.attributes[_DATABASE_URL_ATTRIBUTE] = database_url
    config.attributes[_VERSION_TABLE_ATTRIBUTE] = version_table
    return config


def upgrade(
    database_url: str,
    script_location: str | pathlib.Path,
    *,
    version_table: str = DEFAULT_VERSION_TABLE,
    revision: str = "head",
) -> None:
    """Migrate the database at `database_url` up to `revision` (default: the newest).

    On PostgreSQL the upgrade holds an advisory lock of the database: replicas of a service start
    together and each migrates on start; the second waits, then finds the database at the head
    (without the lock both created the same tables, and one crashed on the catalog's unique key).
    """
    config = alembic_config(database_url, script_location, version_table=version_table)
    with _migration_lock(database_url):
        command.upgrade(config, revision)


MIGRATION_ADVISORY_LOCK_KEY = 0x6D6A5F6D69677261  # "mj_migra"


@contextlib.contextmanager
def _migration_lock(database_url: str) -> Iterator[None]:
    """A session-level advisory lock, polled with short autocommit statements: a waiter blocked
    inside a transaction would make the holder's ``CREATE INDEX CONCURRENTLY`` wait for it."""
    if sqlalchemy.make_url(database_url).get_backend_name() != "postgresql":
        yield
        return
    engine = create_engine_for(database_url)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            while not connection.execute(_TRY_LOCK, {"key": MIGRATION_ADVISORY_LOCK_KEY}).scalar_one():
                time.sleep(MIGRATION_LOCK_POLL_SECONDS)
            try:
                yield
            finally:
                connection.execute(_UNLOCK, {"key": MIGRATION_ADVISORY_LOCK_KEY})
    finally:
        engine.dispose()


MIGRATION_LOCK_POLL_SECONDS = 0.2
_TRY_LOCK = sqlalchemy.text("SELECT pg_try_advisory_lock(:key)")
_UNLOCK = sqlalchemy.text("SELECT pg_advisory_unlock(:key)")


def downgrade(
    database_url: str,
    script_location: str | pathlib.Path,
    revision: str,
    *,
    version_table: str = DEFAULT_VERSION_TABLE,
) -> None:
    """Migrate the database down to `revision` ("base" removes every migrated table)."""
    config = alembic_config(database_url, script_location, version_table=version_table)
    command.downgrade(config, revision)


def current_revision(database_url: str, *, version_table: str = DEFAULT_VERSION_TABLE) -> str | None:
    """The revision the database is at, or None when it has never been migrated."""
    engine = create_engine_for(database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"version_table": version_table})
            return context.get_current_revision()
    finally:
        engine.dispose()


def run_alembic_environment(target_metadata: MetaData | Sequence[MetaData] | None) -> None:
    """The body of a service's alembic `env.py`: run the migrations alembic asked for.

    Works for `upgrade()`/`downgrade()` above (URL and version table from `Config.attributes`)
    and for the alembic command line, where the URL comes from `sqlalchemy.url` in alembic.ini
    or the `-x database_url=...` argument. SQLite gets batch mode, because its ALTER TABLE
    cannot change columns in place.
    """
    from alembic import context  # Only usable while alembic runs env.py.

    config = context.config
    database_url = (
        config.attributes.get(_DATABASE_URL_ATTRIBUTE)
        or context.get_x_argument(as_dictionary=True).get("database_url")
        or config.get_main_option("sqlalchemy.url")
    )
    if not database_url:
        raise RuntimeError("no database URL: call mahjong_platform.migrations.upgrade(database_url, ...)")
    version_table = config.attributes.get(_VERSION_TABLE_ATTRIBUTE, DEFAULT_VERSION_TABLE)
    render_as_batch = database_url.startswith("sqlite")
    if context.is_offline_mode():
        context.configure(
            url=database_url,
            target_metadata=target_metadata,
            version_table=version_table,
            render_as_batch=render_as_batch,
            literal_binds=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine_for(database_url)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                version_table=version_table,
                render_as_batch=render_as_batch,
            )
            with context.begin_transaction():
                context.run_migrations()
            connection.commit()
    finally:
        engine.dispose()
