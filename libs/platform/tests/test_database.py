"""Database engines and transactions: SQLite settings, rollback, PostgreSQL connection options."""

from __future__ import annotations

import datetime
import gc
import pathlib
import sqlite3
import time
import weakref
from typing import Any

import pytest
import sqlalchemy
import sqlalchemy.dialects.postgresql
from mahjong_platform.database import (
    compiled_once,
    create_engine_for,
    create_session_factory,
    read_transaction,
    sqlite_rows,
    sqlite_url,
    transaction,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.engine.interfaces import CacheStats

_metadata = sqlalchemy.MetaData()
_notes = sqlalchemy.Table("notes", _metadata, sqlalchemy.Column("text", sqlalchemy.String(50)))


class _AbortError(Exception):
    pass


def test_sqlite_files_live_under_the_data_directory_which_is_created(tmp_path: pathlib.Path) -> None:
    url = sqlite_url(tmp_path / "data" / "nested", "ledger")
    assert url == f"sqlite:///{tmp_path}/data/nested/ledger.sqlite3"
    engine = create_engine_for(url)
    try:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text("SELECT 1"))
    finally:
        engine.dispose()
    assert (tmp_path / "data" / "nested" / "ledger.sqlite3").exists()


def test_sqlite_connections_use_wal_foreign_keys_and_a_busy_timeout(tmp_path: pathlib.Path) -> None:
    engine = create_engine_for(sqlite_url(tmp_path, "settings"), sqlite_busy_timeout_ms=1234)
    try:
        with engine.connect() as connection:
            settings = {
                name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "foreign_keys", "busy_timeout")
            }
        assert settings == {"journal_mode": "wal", "foreign_keys": 1, "busy_timeout": 1234}
    finally:
        engine.dispose()


@pytest.mark.parametrize("name", ["", "../escape", ".hidden", "a/b"])
def test_sqlite_database_names_are_plain_file_stems(tmp_path: pathlib.Path, name: str) -> None:
    with pytest.raises(ValueError, match="plain file stem"):
        sqlite_url(tmp_path, name)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite://", "SQLite file"),
        ("sqlite:///:memory:", "SQLite file"),
        ("postgresql://user@localhost/db", "psycopg 3"),
        ("mysql+pymysql://user@localhost/db", "unsupported"),
    ],
)
def test_unsupported_databases_are_refused_with_a_reason(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create_engine_for(url)


def _engine_with_notes(url: str) -> Engine:
    engine = create_engine_for(url)
    _metadata.create_all(engine)
    return engine


def _note_count(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(
            connection.execute(sqlalchemy.select(sqlalchemy.func.count()).select_from(_notes)).scalar_one()
        )


def test_a_transaction_commits_on_success_and_rolls_back_on_error(database_url: str) -> None:
    engine = _engine_with_notes(database_url)
    session_factory = create_session_factory(engine)
    try:
        with transaction(session_factory) as session:
            session.execute(_notes.insert().values(text="kept"))
        with pytest.raises(_AbortError), transaction(session_factory) as session:
            session.execute(_notes.insert().values(text="rolled back"))
            raise _AbortError
        assert _note_count(engine) == 1
    finally:
        engine.dispose()


@pytest.mark.integration
def test_postgresql_connections_have_a_statement_timeout(postgres_database_url: str) -> None:
    engine = create_engine_for(postgres_database_url, postgresql_statement_timeout_ms=2500)
    try:
        with engine.connect() as connection:
            assert connection.exec_driver_sql("SHOW statement_timeout").scalar() == "2500ms"
    finally:
        engine.dispose()


@pytest.mark.integration
def test_a_pooled_postgresql_connection_the_server_closed_is_replaced_at_check_out(
    postgres_database_url: str,
) -> None:
    """A restart or `pg_terminate_backend` closes pooled connections: the next unit of work gets
    a new one and succeeds, instead of failing on the dead one."""
    engine = create_engine_for(postgres_database_url)
    admin = sqlalchemy.create_engine(postgres_database_url, isolation_level="AUTOCOMMIT")
    backend_pid = sqlalchemy.text("SELECT pg_backend_pid()")
    try:
        with transaction(create_session_factory(engine)) as session:
            old_pid = session.execute(backend_pid).scalar_one()
        with admin.connect() as connection:
            assert connection.execute(sqlalchemy.text(f"SELECT pg_terminate_backend({old_pid})")).scalar_one()
            gone = sqlalchemy.text(f"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = {old_pid}")
            for _attempt in range(500):
                if connection.execute(gone).scalar_one():
                    break
                time.sleep(0.02)
        with transaction(create_session_factory(engine)) as session:
            new_pid = session.execute(backend_pid).scalar_one()
    finally:
        engine.dispose()
        admin.dispose()
    assert new_pid != old_pid


@pytest.mark.integration
def test_a_postgresql_check_out_sends_nothing_to_the_server(
    postgres_database_url: str, tmp_path: pathlib.Path
) -> None:
    """No ping per check-out (`pool_pre_ping` sent a ``SELECT 1``, one round trip per transaction):
    the wire trace of a pooled connection shows only the unit of work's own statements."""
    engine = create_engine_for(postgres_database_url)
    trace_path = tmp_path / "libpq.trace"
    try:
        with engine.connect() as connection:  # the pool's one connection, now made
            dbapi_connection = connection.connection.dbapi_connection
        assert dbapi_connection is not None
        with trace_path.open("wb") as trace:
            dbapi_connection.pgconn.trace(trace.fileno())
            try:
                with engine.connect() as connection:
                    assert connection.connection.dbapi_connection is dbapi_connection
                with engine.connect() as connection:
                    connection.exec_driver_sql("SELECT 7").scalar_one()
            finally:
                dbapi_connection.pgconn.untrace()
    finally:
        engine.dispose()
    # libpq's trace: time, F (sent by us) or B (by the server), length, message, its content.
    sent = [
        line.split("\t")[3:] for line in trace_path.read_text().splitlines() if line.split("\t")[1] == "F"
    ]
    assert sent == [["Query", ' "BEGIN"'], ["Query", ' "SELECT 7"'], ["Query", ' "ROLLBACK"']]


def test_a_read_transaction_does_not_wait_for_a_writer_on_sqlite(tmp_path: pathlib.Path) -> None:
    """Readers (views, stream polls) take a snapshot under WAL instead of queueing behind writers."""
    from mahjong_platform.database import create_session_factory, read_transaction, transaction

    engine = create_engine_for(sqlite_url(tmp_path, "readers"), sqlite_busy_timeout_ms=200)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE numbers (value INTEGER)")
        connection.exec_driver_sql("INSERT INTO numbers VALUES (1)")
    session_factory = create_session_factory(engine)
    with transaction(session_factory) as writer:
        writer.execute(sqlalchemy.text("INSERT INTO numbers VALUES (2)"))
        with read_transaction(session_factory) as reader:
            seen = reader.execute(sqlalchemy.text("SELECT count(*) FROM numbers")).scalar_one()
        assert seen == 1  # the committed snapshot, without waiting for the writer's lock
    with read_transaction(session_factory) as reader:
        assert reader.execute(sqlalchemy.text("SELECT count(*) FROM numbers")).scalar_one() == 2
    engine.dispose()


def test_a_sqlite_transaction_begins_through_the_driver_unless_a_cursor_listener_watches(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BEGIN IMMEDIATE (a writer) and BEGIN (a reader) are sent to SQLite on the driver's
    connection, not through SQLAlchemy's execution (its context, result and events cost several
    times the statement, at every transaction); a cursor listener (the statement audits) still
    sees them, as it sees `sqlite_rows`' statements."""
    engine = create_engine_for(sqlite_url(tmp_path, "begins"))
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE numbers (value INTEGER)")
    engine.dispose()
    traced: list[str] = []
    sqlalchemy.event.listen(
        engine,
        "connect",
        lambda dbapi_connection, _record: dbapi_connection.set_trace_callback(traced.append),
    )
    executed: list[str] = []
    exec_driver_sql = sqlalchemy.Connection.exec_driver_sql

    def recording(connection: sqlalchemy.Connection, statement: str, *rest: Any, **options: Any) -> Any:
        executed.append(statement)
        return exec_driver_sql(connection, statement, *rest, **options)

    monkeypatch.setattr(sqlalchemy.Connection, "exec_driver_sql", recording)
    session_factory = create_session_factory(engine)
    with transaction(session_factory) as writer:
        sqlite_rows(writer, "INSERT INTO numbers VALUES (?)", (1,))
    with read_transaction(session_factory) as reader:
        assert sqlite_rows(reader, "SELECT count(*) FROM numbers", ()) == [(1,)]
    assert traced == [
        "BEGIN IMMEDIATE",
        "INSERT INTO numbers VALUES (1)",
        "COMMIT",
        "BEGIN",
        "SELECT count(*) FROM numbers",
        "COMMIT",
    ]
    assert executed == []  # none through SQLAlchemy's execution

    cursor_statements: list[str] = []
    sqlalchemy.event.listen(
        engine,
        "before_cursor_execute",
        lambda _connection, _cursor, statement, *_rest: cursor_statements.append(statement),
    )
    with transaction(session_factory) as writer:
        sqlite_rows(writer, "INSERT INTO numbers VALUES (?)", (2,))
    assert cursor_statements == ["BEGIN IMMEDIATE", "INSERT INTO numbers VALUES (?)"]
    engine.dispose()


def test_a_sqlite_writer_gets_back_the_connection_it_returned_last(tmp_path: pathlib.Path) -> None:
    """The SQLite pool is last in, first out: a writer's next transaction runs on the connection
    of its last one, whose page cache its own commits kept valid, not on the pool's longest idle
    connection (first in, first out), whose cache every commit since had invalidated."""
    engine = create_engine_for(sqlite_url(tmp_path, "lifo"))
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE numbers (value INTEGER)")
    idle = [engine.raw_connection() for _ in range(4)]  # the pool holds several idle connections
    for pooled in idle:
        pooled.close()
    session_factory = create_session_factory(engine)
    used = []
    for value in range(6):
        with transaction(session_factory) as writer:
            sqlite_rows(writer, "INSERT INTO numbers VALUES (?)", (value,))
            used.append(id(writer.connection().connection.dbapi_connection))
    assert len(set(used)) == 1
    engine.dispose()


def test_a_read_transaction_sees_one_snapshot_and_refuses_writes(database_url: str) -> None:
    """Its statements agree with each other: a commit made between two of them is not seen by the
    second (PostgreSQL: REPEATABLE READ READ ONLY; under READ COMMITTED the second count would be
    2). On PostgreSQL a write in it is refused."""
    from mahjong_platform.database import create_session_factory, read_transaction, transaction

    engine = create_engine_for(database_url)
    table = f"snapshot_{time.monotonic_ns()}"
    with engine.begin() as connection:
        connection.exec_driver_sql(f"CREATE TABLE {table} (value INTEGER)")
        connection.exec_driver_sql(f"INSERT INTO {table} VALUES (1)")
    session_factory = create_session_factory(engine)
    count = sqlalchemy.text(f"SELECT count(*) FROM {table}")
    try:
        with read_transaction(session_factory) as reader:
            assert reader.execute(count).scalar_one() == 1
            with transaction(session_factory) as writer:
                writer.execute(sqlalchemy.text(f"INSERT INTO {table} VALUES (2)"))
            assert reader.execute(count).scalar_one() == 1
        with read_transaction(session_factory) as reader:
            assert reader.execute(count).scalar_one() == 2
        if engine.dialect.name == "postgresql":
            refused = pytest.raises(sqlalchemy.exc.InternalError, match="read-only transaction")
            with refused, read_transaction(session_factory) as reader:
                reader.execute(sqlalchemy.text(f"INSERT INTO {table} VALUES (3)"))
        with transaction(session_factory) as writer:  # the pooled connections were reset
            writer.execute(sqlalchemy.text(f"INSERT INTO {table} VALUES (3)"))
            assert writer.execute(count).scalar_one() == 3
    finally:
        with engine.begin() as connection:
            connection.exec_driver_sql(f"DROP TABLE {table}")
        engine.dispose()


_marks = sqlalchemy.Table(
    "marks",
    _metadata,
    sqlalchemy.Column("name", sqlalchemy.String(50), primary_key=True),
    sqlalchemy.Column("count", sqlalchemy.BigInteger, nullable=False),
    sqlalchemy.Column("marked_at", sqlalchemy.DateTime(timezone=True), nullable=False),
)


def _mark_upsert(dialect_name: str) -> sqlalchemy.Insert:
    insert = sqlalchemy.dialects.postgresql.insert if dialect_name == "postgresql" else sqlite.insert
    statement = insert(_marks)
    return statement.on_conflict_do_update(
        index_elements=["name"],
        set_={"count": _marks.c.count + statement.excluded.count, "marked_at": statement.excluded.marked_at},
    ).returning(_marks.c.count)


def test_a_statement_compiled_once_runs_as_the_statement_and_is_cached(database_url: str) -> None:
    """compiled_once: an ON CONFLICT upsert, which SQLAlchemy compiles at every execution, runs as
    one cached text statement with the same SQL, the same typed parameters (a timezone-aware
    datetime stored as the original stores it) and its RETURNING rows."""
    engine = create_engine_for(database_url)
    try:
        _marks.create(engine)
        factory = create_session_factory(engine)
        upsert = compiled_once(_mark_upsert)
        at = datetime.datetime(2026, 12, 1, 13, 0, 0, 123456, tzinfo=datetime.UTC)
        with transaction(factory) as session:
            statement = upsert(session)
            assert statement is upsert(session)  # built once per dialect
            assert str(statement.compile(dialect=engine.dialect)) == str(
                _mark_upsert(engine.dialect.name).compile(dialect=engine.dialect)
            )
            counts = [
                session.execute(statement, {"name": "a", "count": count, "marked_at": at}).scalar_one()
                for count in (1, 2, 3)
            ]
            session.execute(_mark_upsert(engine.dialect.name), {"name": "b", "count": 6, "marked_at": at})
        assert counts == [1, 3, 6]
        with engine.connect() as connection:
            stored = connection.execute(
                sqlalchemy.text("SELECT name, count, marked_at FROM marks ORDER BY name")
            )
            rows = [tuple(row) for row in stored]
        assert [(name, count) for name, count, _ in rows] == [("a", 6), ("b", 6)]
        assert rows[0][2] == rows[1][2]  # the same stored form of the same datetime
        hits: list[object] = []

        @sqlalchemy.event.listens_for(engine, "after_cursor_execute")
        def _note_cache_use(*arguments: object) -> None:
            if str(arguments[2]).startswith("INSERT INTO marks"):
                hits.append(arguments[4].cache_hit)  # type: ignore[attr-defined]

        with transaction(factory) as session:
            for count in range(3):
                session.execute(upsert(session), [{"name": "c", "count": count, "marked_at": at}])
                session.execute(_mark_upsert(engine.dialect.name), {"name": "d", "count": 1, "marked_at": at})
        # The original has no cache key: it was compiled at every execution.
        assert hits == [CacheStats.CACHE_HIT, CacheStats.NO_CACHE_KEY] * 3
    finally:
        engine.dispose()


def test_an_engine_that_read_is_collected_once_dropped(tmp_path: pathlib.Path) -> None:
    """`read_transaction` keeps its read-only option engine on the engine itself: a cache keyed by
    the engine kept every engine that had read alive for good (the option engine refers to its
    base), with its pool and the SQLite files' descriptors."""
    engine = create_engine_for(sqlite_url(tmp_path, "collected"))
    with read_transaction(create_session_factory(engine)) as reader:
        assert reader.execute(sqlalchemy.text("SELECT 1")).scalar_one() == 1
    del reader
    engine.dispose()
    dropped = weakref.ref(engine)
    del engine
    gc.collect()
    assert dropped() is None


def test_a_sqlite_driver_error_is_raised_as_sqlalchemys_at_begin_and_at_a_statement(
    tmp_path: pathlib.Path,
) -> None:
    """Both statements sent on the driver (a transaction's BEGIN IMMEDIATE, `sqlite_rows`) raise a
    driver error as SQLAlchemy's, as its own execution would: a writer that finds the write lock
    taken past its busy timeout gets `OperationalError`, a violated key `IntegrityError`."""
    url = sqlite_url(tmp_path, "errors")
    engine = create_engine_for(url, sqlite_busy_timeout_ms=0)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE numbers (value INTEGER PRIMARY KEY)")
    session_factory = create_session_factory(engine)
    with transaction(session_factory) as writer:
        sqlite_rows(writer, "INSERT INTO numbers VALUES (?)", (1,))
    with pytest.raises(sqlalchemy.exc.IntegrityError), transaction(session_factory) as writer:
        sqlite_rows(writer, "INSERT INTO numbers VALUES (?)", (1,))
    holder = sqlite3.connect(pathlib.Path(tmp_path, "errors.sqlite3"), isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with (
            pytest.raises(sqlalchemy.exc.OperationalError, match="locked"),
            transaction(session_factory) as writer,
        ):
            writer.connection()  # the session begins at its first connection
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    engine.dispose()
