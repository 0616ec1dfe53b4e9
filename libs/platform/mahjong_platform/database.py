"""Database engines, sessions and transactions for SQLite (the embedded default) and PostgreSQL.

Each service owns one database: a SQLite file under a data directory by default, so a fresh
checkout runs with nothing installed but Python, or PostgreSQL (`postgresql+psycopg://...`) in
production and in the integration tests. Services write all their rows through `transaction()`,
so a unit of work either commits completely or leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import pathlib
import select
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

import sqlalchemy
import sqlalchemy.dialects.postgresql
import sqlalchemy.dialects.postgresql.psycopg
import sqlalchemy.dialects.sqlite.pysqlite
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine
from sqlalchemy.orm import Session, sessionmaker

# Writers of other processes (a rebuild, an operator's sqlite3 shell) wait this long for the lock.
SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_POOL_SIZE = 32
SQLITE_POOL_MAX_OVERFLOW = 96
POSTGRESQL_CONNECT_TIMEOUT_SECONDS = 10
POSTGRESQL_POOL_SIZE = 5
POSTGRESQL_POOL_MAX_OVERFLOW = 5
POSTGRESQL_POOL_TIMEOUT_SECONDS = 30
# A statement that runs longer than this is a bug or a lock pile-up; fail it instead of hanging.
POSTGRESQL_STATEMENT_TIMEOUT_MS = 30_000

SessionFactory = sessionmaker[Session]
StatementT = TypeVar("StatementT")
_T = TypeVar("_T")
READ_ONLY_OPTION = "mahjong_read_only"


def sqlite_url(data_directory: pathlib.Path | str, database_name: str) -> str:
    """The URL of the SQLite file `<data_directory>/<database_name>.sqlite3`."""
    if not database_name or "/" in database_name or database_name.startswith("."):
        raise ValueError(f"database name {database_name!r} must be a plain file stem")
    path = pathlib.Path(data_directory).resolve() / f"{database_name}.sqlite3"
    return f"sqlite:///{path}"


def create_engine_for(
    url: str | URL,
    *,
    sqlite_busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS,
    postgresql_statement_timeout_ms: int = POSTGRESQL_STATEMENT_TIMEOUT_MS,
    echo: bool = False,
) -> Engine:
    """An engine configured for how the platform uses the database.

    SQLite (file databases only): the parent directory is created; every connection enables WAL
    (readers do not block the single writer), foreign keys and a busy timeout; and every
    transaction starts with `BEGIN IMMEDIATE`. The Python sqlite3 driver would otherwise start
    transactions lazily at the first write, so a read-then-write transaction (check a stream's
    version, then append) could fail with "database is locked" without waiting for the busy
    timeout; taking the write lock up front makes writers queue instead.

    PostgreSQL (`postgresql+psycopg://`): a bounded pool, a connect timeout and a statement
    timeout; a pooled connection the server has closed is replaced at check-out
    (`_replace_a_closed_connection`).
    """
    parsed_url = sqlalchemy.make_url(url)
    if parsed_url.get_backend_name() == "sqlite":
        return _create_sqlite_engine(parsed_url, busy_timeout_ms=sqlite_busy_timeout_ms, echo=echo)
    if parsed_url.get_backend_name() == "postgresql":
        if parsed_url.get_driver_name() != "psycopg":
            raise ValueError(f"use the psycopg 3 driver: postgresql+psycopg://, not {parsed_url.drivername}")
        engine = sqlalchemy.create_engine(
            parsed_url,
            echo=echo,
            pool_size=POSTGRESQL_POOL_SIZE,
            max_overflow=POSTGRESQL_POOL_MAX_OVERFLOW,
            pool_timeout=POSTGRESQL_POOL_TIMEOUT_SECONDS,
            connect_args={
                "connect_timeout": POSTGRESQL_CONNECT_TIMEOUT_SECONDS,
                "options": f"-c statement_timeout={postgresql_statement_timeout_ms}",
            },
        )
        event.listen(engine, "checkout", _replace_a_closed_connection)
        return engine
    raise ValueError(f"unsupported database {parsed_url.drivername!r}: use sqlite or postgresql+psycopg")


def _replace_a_closed_connection(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """PostgreSQL: refuse a pooled connection the server has closed, so the pool connects anew
    (SQLAlchemy's pessimistic disconnect handling, `DisconnectionError` at check-out).

    The server says so on the socket: a restart, `pg_terminate_backend`, an idle timeout or a
    proxy's failover send an error and close, so an idle connection's socket with anything to read
    is one to drop (anything else unasked on an idle connection, e.g. a changed setting's report,
    only costs a reconnect). This replaces `pool_pre_ping`, whose ``SELECT 1`` was one more round
    trip per transaction: in a busy service each round trip waits for the GIL to come back.
    Neither finds a server that vanished without closing (the ping waited for it too).
    """
    if dbapi_connection.closed or dbapi_connection.broken:
        raise sqlalchemy.exc.DisconnectionError("the connection is closed")
    try:
        socket_fd = dbapi_connection.pgconn.socket
    except Exception as error:  # psycopg.OperationalError: the connection is bad
        raise sqlalchemy.exc.DisconnectionError("the connection has no socket") from error
    readable = select.poll()
    readable.register(socket_fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    if readable.poll(0):
        raise sqlalchemy.exc.DisconnectionError("the server closed the connection or sent something unasked")


def create_session_factory(engine: Engine) -> SessionFactory:
    """A session factory bound to `engine`; objects stay usable after commit (no expiry)."""
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextlib.contextmanager
def transaction(session_factory: SessionFactory) -> Iterator[Session]:
    """One unit of work: commits when the block ends normally, rolls back on any exception.

    On SQLite the writers of this process queue on an in-process lock before BEGIN IMMEDIATE:
    SQLite has one writer at a time anyway, and its busy handler makes waiting writers sleep and
    poll, so under many concurrent writers (64 players at 16 tables) some waited past the busy
    timeout ("database is locked") while the lock was free most of the time.
    """
    with _writer_lock(session_factory.kw["bind"]), session_factory.begin() as session:
        yield session


_SQLITE_WRITER_LOCKS: weakref.WeakKeyDictionary[Engine, threading.RLock] = weakref.WeakKeyDictionary()
_SQLITE_WRITER_LOCKS_GUARD = threading.Lock()


def _writer_lock(engine: Engine) -> contextlib.AbstractContextManager[object]:
    if engine.dialect.name != "sqlite":
        return contextlib.nullcontext()
    with _SQLITE_WRITER_LOCKS_GUARD:
        lock = _SQLITE_WRITER_LOCKS.get(engine)
        if lock is None:
            lock = _SQLITE_WRITER_LOCKS[engine] = threading.RLock()
    return lock


_READ_ONLY_ENGINE_ATTRIBUTE = "_mahjong_read_only_engine"


def _read_only_engine(engine: Engine, options: dict[str, object]) -> Engine:
    """`engine` with the read-only options, made once per engine (an option engine per call would
    redo its set-up for every read). Kept on the engine itself: the option engine refers to its
    base, so a cache keyed by the engine would keep every engine (and its pool) alive for good;
    the two referring to each other are collected together."""
    read_only: Engine | None = getattr(engine, _READ_ONLY_ENGINE_ATTRIBUTE, None)
    if read_only is None:
        read_only = engine.execution_options(**options)
        setattr(engine, _READ_ONLY_ENGINE_ATTRIBUTE, read_only)
    return read_only


@contextlib.contextmanager
def read_transaction(session_factory: SessionFactory) -> Iterator[Session]:
    """A unit of work that only reads: a consistent snapshot that never waits for writers.

    On SQLite it starts with a plain BEGIN instead of BEGIN IMMEDIATE, so queries such as a game
    view or a stream poll do not serialize behind every write; WAL gives the transaction one
    snapshot. On PostgreSQL it is REPEATABLE READ READ ONLY: its statements share one snapshot
    (under the default READ COMMITTED each statement would see the commits made since the one
    before, so a read of a table's status and then its events could disagree), and a read-only
    transaction never fails with a serialization error. Writing in it is a bug (on SQLite it
    could fail with "database is locked" rather than wait; PostgreSQL refuses it).
    """
    bind = session_factory.kw["bind"]
    options: dict[str, object] = {READ_ONLY_OPTION: True}
    if bind.dialect.name == "postgresql":
        options.update(isolation_level="REPEATABLE READ", postgresql_readonly=True)
    read_only_engine = _read_only_engine(bind, options)
    with Session(bind=read_only_engine, expire_on_commit=False) as session, session.begin():
        yield session


def _create_sqlite_engine(url: URL, *, busy_timeout_ms: int, echo: bool) -> Engine:
    assert busy_timeout_ms >= 0, busy_timeout_ms
    database = url.database
    if not database or database == ":memory:":
        raise ValueError("use a SQLite file: an in-memory database is private to one connection")
    pathlib.Path(database).parent.mkdir(parents=True, exist_ok=True)
    # A service's gRPC workers and background threads share the pool; a connection made per
    # checkout beyond the pool would redo the PRAGMAs below every time.
    # Last in, first out: a thread's next transaction gets back the connection it returned last,
    # whose page cache is still good unless another connection wrote since (under WAL a
    # connection throws its cache away when the database changed since its last transaction).
    # First in, first out (SQLAlchemy's default) handed the group committer the pool's longest
    # idle connection every time, whose cache the writer's own commits had invalidated: each
    # batch read its index pages again from the operating system.
    engine = sqlalchemy.create_engine(
        url,
        echo=echo,
        connect_args={"timeout": busy_timeout_ms / 1000},
        pool_size=SQLITE_POOL_SIZE,
        max_overflow=SQLITE_POOL_MAX_OVERFLOW,
        pool_use_lifo=True,
    )

    @event.listens_for(engine, "connect")
    def _configure_connection(dbapi_connection: Any, _connection_record: Any) -> None:
        # Autocommit at the driver level, so SQLAlchemy's "begin" hook below decides when and how
        # a transaction starts (the recipe from SQLAlchemy's SQLite dialect documentation).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection: sqlalchemy.Connection) -> None:
        # A read-only unit of work (`read_transaction`) takes no write lock: under WAL it reads a
        # consistent snapshot while a writer works, instead of queueing behind every writer.
        read_only = connection.get_execution_options().get(READ_ONLY_OPTION, False)
        # Through the driver, as `sqlite_rows`: SQLAlchemy's execution (context, result, events)
        # cost several times the statement, at every transaction of every service.
        dbapi_connection = connection.connection.dbapi_connection
        assert isinstance(dbapi_connection, sqlite3.Connection), dbapi_connection
        _sqlite_run(connection, dbapi_connection, "BEGIN" if read_only else "BEGIN IMMEDIATE", ())

    return engine


class PerDialect(Generic[StatementT]):
    """A statement built once per database dialect, for the few that differ between SQLite and
    PostgreSQL (see `one_of`). Call it with the session to get the statement for its database."""

    def __init__(self, build: Callable[[str], StatementT]) -> None:
        self._build = build
        self._built: dict[str, StatementT] = {}

    def __call__(self, session: Session) -> StatementT:
        dialect_name = session.get_bind().dialect.name
        statement = self._built.get(dialect_name)
        if statement is None:
            statement = self._built[dialect_name] = self._build(dialect_name)
        return statement


def compiled_once(build: Callable[[str], sqlalchemy.ClauseElement]) -> PerDialect[sqlalchemy.TextClause]:
    """`PerDialect` for a statement SQLAlchemy compiles anew at every execution, compiled once.

    SQLAlchemy 2.0 caches no dialect-specific ``INSERT ... ON CONFLICT`` (their `Insert` classes
    set ``inherit_cache = False``): each execution compiled the upsert again, about 80 µs, which
    was the largest single cost of a consumer batch (its positions upsert). The statement built
    for the dialect is compiled here once into a text statement with the same SQL and the same
    typed parameters (so values are bound exactly as before, e.g. a datetime on SQLite); text
    statements are cached. Rows it returns come as the driver gives them (no result types).
    """

    def build_text(dialect_name: str) -> sqlalchemy.TextClause:
        compiled = build(dialect_name).compile(dialect=_NAMED_PARAMETER_DIALECTS[dialect_name]())
        assert isinstance(compiled, sqlalchemy.sql.compiler.SQLCompiler), compiled
        assert not compiled.literal_execute_params and not compiled.post_compile_params, compiled
        return sqlalchemy.text(str(compiled)).bindparams(
            *(sqlalchemy.bindparam(name, type_=parameter.type) for name, parameter in compiled.binds.items())
        )

    return PerDialect(build_text)


def _named_parameter_dialect(dialect_class: type[sqlalchemy.Dialect]) -> Callable[[], sqlalchemy.Dialect]:
    def dialect() -> sqlalchemy.Dialect:
        named = dialect_class(paramstyle="named")  # type: ignore[call-arg]
        # No bind casts (psycopg's ``:name::VARCHAR``): the text's typed parameters get them
        # when it runs, as the original statement's did.
        named.bind_typing = sqlalchemy.engine.interfaces.BindTyping.NONE
        return named

    return dialect


_NAMED_PARAMETER_DIALECTS: dict[str, Callable[[], sqlalchemy.Dialect]] = {
    "sqlite": _named_parameter_dialect(sqlalchemy.dialects.sqlite.pysqlite.dialect),
    "postgresql": _named_parameter_dialect(sqlalchemy.dialects.postgresql.psycopg.dialect),
}
"""The SQL text of `compiled_once` uses ``:name`` parameters, which `sqlalchemy.text` reads."""


def one_of(
    column: sqlalchemy.ColumnElement[Any], parameter_name: str, dialect_name: str
) -> sqlalchemy.ColumnElement[bool]:
    """``column`` is one of the values of the list parameter ``parameter_name``.

    PostgreSQL: ``= ANY(array)``, one parameter, so the statement text is the same for any list
    length (an expanding ``IN`` makes a new text per length, which psycopg parses again every
    time: 70 ms for 500 values). SQLite has no arrays: an expanding ``IN``.
    """
    if dialect_name == "postgresql":
        array_type = sqlalchemy.dialects.postgresql.ARRAY(column.type)
        return column == sqlalchemy.any_(sqlalchemy.bindparam(parameter_name, type_=array_type))
    return column.in_(sqlalchemy.bindparam(parameter_name, expanding=True))


COPY_ROWS_MIN = 16
"""Fewer rows go as an executemany: one pipelined round trip, where COPY takes two."""


def insert_rows(session: Session, table: sqlalchemy.Table, rows: Sequence[Mapping[str, Any]]) -> int | None:
    """Insert `rows` (dicts with the same keys: column names) into `table`, in the caller's
    transaction, in the given order (identity columns such as the outbox id number them so).

    PostgreSQL: one ``COPY ... FROM STDIN`` (psycopg formats the rows in C). Its executemany
    sends a Bind/Execute per row, which the server runs one by one (a rebuild's ledger batch of
    500 events, about 3,000 rows, waited about 60 ms on that), and an ``INSERT ... SELECT FROM
    unnest(arrays)`` spent as long dumping the arrays in Python. Errors are raised as
    SQLAlchemy's (a unique key violated is an `IntegrityError`, as with an insert). SQLite:
    multi-row INSERT statements (`_insert_rows_sqlite`).

    Returns, on SQLite, the rowid of the last row inserted (a table whose rowid is its integer
    primary key numbers its new rows one after another from the highest: the rows are that id and
    the ones just below it); None on PostgreSQL or when there are no rows.
    """
    if not rows:
        return None
    dialect = session.get_bind().dialect
    if dialect.name == "sqlite":
        return _insert_rows_sqlite(session, dialect, table, rows)
    if len(rows) < COPY_ROWS_MIN:
        session.execute(_insert_statement(table), list(rows))
        return None
    import psycopg  # only with PostgreSQL

    columns = tuple(rows[0])
    statement = _copy_statement(dialect, table, columns)
    dbapi_connection = session.connection().connection.dbapi_connection
    assert isinstance(dbapi_connection, psycopg.Connection), dbapi_connection
    try:
        with dbapi_connection.cursor() as cursor, cursor.copy(statement) as copy:
            for row in rows:
                if len(row) != len(columns):
                    raise ValueError(f"rows for {table.name} name different columns: {sorted(row)}")
                copy.write_row([row[column] for column in columns])
    except psycopg.Error as error:
        raise sqlalchemy.exc.DBAPIError.instance(statement, None, error, psycopg.Error) from error
    return None


SQLITE_ROWS_PER_INSERT_MAX = 256
"""SQLite: rows per multi-row INSERT (a power of two; see `_insert_rows_sqlite`)."""
_SQLITE_VARIABLES_MAX = 32_766 if sqlite3.sqlite_version_info >= (3, 32) else 999


def upsert_rows(
    session: Session, table: sqlalchemy.Table, rows: Sequence[Mapping[str, Any]], key: Sequence[str]
) -> None:
    """Insert `rows` (dicts with the same keys), or where `table` already has a row with the same
    `key` (its primary key or another unique key), set that row's other columns the row names;
    in the caller's transaction, a key at most once. SQLite: multi-row statements, as
    `insert_rows`; PostgreSQL: one pipelined executemany of ``INSERT ... ON CONFLICT``."""
    if not rows:
        return
    dialect = session.get_bind().dialect
    columns = tuple(rows[0])
    key = tuple(key)
    if dialect.name == "sqlite":
        _insert_rows_sqlite(session, dialect, table, rows, on_conflict=key)
        return
    statement = _UPSERT_STATEMENTS.get((table.name, columns, key))
    if statement is None:
        statement = _UPSERT_STATEMENTS.setdefault(
            (table.name, columns, key), compiled_once(lambda name: _upsert_of(name, table, columns, key))
        )
    session.execute(statement(session), list(rows))


_UPSERT_STATEMENTS: dict[tuple[str, tuple[str, ...], tuple[str, ...]], PerDialect[sqlalchemy.TextClause]] = {}


def _upsert_of(
    dialect_name: str, table: sqlalchemy.Table, columns: tuple[str, ...], key: tuple[str, ...]
) -> sqlalchemy.ClauseElement:
    assert dialect_name == "postgresql", dialect_name
    insert = sqlalchemy.dialects.postgresql.insert(table).values(
        {column: sqlalchemy.bindparam(column) for column in columns}
    )
    updates = {column: insert.excluded[column] for column in columns if column not in key}
    return insert.on_conflict_do_update(index_elements=list(key), set_=updates)


_SQLITE_DRIVER_KEY = "mahjong_sqlite_driver"


def _sqlite_driver(session: Session) -> tuple[sqlalchemy.Connection, sqlite3.Cursor]:
    """The session's connection and a driver cursor of it, found once per transaction (kept in
    `session.info` with the transaction they belong to: `session.connection()` alone costs about
    as much as running a small statement through the driver). A savepoint is a transaction of
    its own here: the session emits its SAVEPOINT at its first `session.connection()`."""
    known = session.info.get(_SQLITE_DRIVER_KEY)
    if known is not None and known[0] is _innermost_transaction(session):
        return known[1], known[2]
    connection = session.connection()
    dbapi_connection = connection.connection.dbapi_connection
    assert isinstance(dbapi_connection, sqlite3.Connection), dbapi_connection
    cursor = dbapi_connection.cursor()
    session.info[_SQLITE_DRIVER_KEY] = (_innermost_transaction(session), connection, cursor)
    return connection, cursor


def _innermost_transaction(session: Session) -> object:
    nested = session.get_nested_transaction()
    return nested if nested is not None else session.get_transaction()


def sqlite_rows(session: Session, statement: str, parameters: tuple[Any, ...]) -> Sequence[Sequence[Any]]:
    """SQLite: run `statement` (SQL text with ``?`` parameters) in the session's transaction and
    return its rows (tuples in column order; none for an INSERT).

    Through the driver's cursor, not SQLAlchemy's execution machinery, which costs several times
    what the statement itself does (result metadata, execution context, events): 200 µs against
    10 µs a small SELECT, 68 against 15 a one-row INSERT, measured. Errors are raised as
    SQLAlchemy's (a violated unique key is an `IntegrityError`), as `exec_driver_sql` would. While
    anyone listens for the engine's cursor events (the statement audits of the tests and of
    `query_plans`) the statement goes through `exec_driver_sql`, so they see it as before."""
    return _sqlite_execute(session, statement, parameters)[0]


def _sqlite_execute(
    session: Session, statement: str, parameters: tuple[Any, ...]
) -> tuple[Sequence[Sequence[Any]], int | None]:
    """`sqlite_rows`, with the connection's last inserted rowid after the statement."""
    connection, cursor = _sqlite_driver(session)
    return _sqlite_run(connection, cursor, statement, parameters)


def _sqlite_run(
    connection: sqlalchemy.Connection,
    driver: sqlite3.Cursor | sqlite3.Connection,
    statement: str,
    parameters: tuple[Any, ...],
) -> tuple[Sequence[Sequence[Any]], int | None]:
    """SQLite: `statement` on `driver` (a cursor, or the driver connection of `connection`), its
    rows and the last inserted rowid; errors raised as SQLAlchemy's (a violated unique key is an
    `IntegrityError`), as `exec_driver_sql` would. While anyone listens for the engine's cursor
    events (the statement audits of the tests and of `query_plans`) it goes through
    `exec_driver_sql` instead, so they see it."""
    dispatch = connection.dispatch
    if dispatch.before_cursor_execute or dispatch.after_cursor_execute:
        result = connection.exec_driver_sql(statement, parameters)
        return (result.all() if result.returns_rows else []), result.lastrowid
    try:
        cursor = driver.execute(statement, parameters)
        return cursor.fetchall(), cursor.lastrowid
    except sqlite3.Error as error:
        raise sqlalchemy.exc.DBAPIError.instance(statement, parameters, error, sqlite3.Error) from error


def _insert_rows_sqlite(
    session: Session,
    dialect: sqlalchemy.Dialect,
    table: sqlalchemy.Table,
    rows: Sequence[Mapping[str, Any]],
    *,
    on_conflict: tuple[str, ...] = (),
) -> int | None:
    """SQLite: the rows as ``INSERT ... SELECT * FROM (VALUES (...), (...)) WHERE true LIMIT ?``
    statements, one per SQLITE_ROWS_PER_INSERT_MAX rows, each padded with rows of NULLs to a power
    of two that the LIMIT (the real rows' count) cuts off (so a table has a few statement texts,
    which stay in the driver's cache, and a group commit's rows of a table are one statement).

    The driver's executemany steps its statement once per row, and each step releases the GIL and
    takes it back (from a busy event loop, that can wait up to the interpreter's switch interval);
    a group commit writes ~100 rows. One statement per chunk steps once; chunks of power-of-two
    sizes took one statement per bit of the row count. The values are bound as SQLAlchemy would
    (the columns' bind processors, e.g. its SQLite datetime text), except bytes, which the driver
    takes as they are. A chunk is one statement, so a violated unique key inserts none of its rows;
    the rows go in in their order (the VALUES are read in order). `on_conflict`: the key of
    `upsert_rows`. Returns the last inserted rowid (see `insert_rows`)."""
    columns = tuple(rows[0])
    processors = _sqlite_bind_processors(dialect, table, columns)
    per_statement = min(
        SQLITE_ROWS_PER_INSERT_MAX, _power_of_two_at_most((_SQLITE_VARIABLES_MAX - 1) // len(columns))
    )
    width = len(columns)
    processed = [(index, processor) for index, (_column, processor) in enumerate(processors) if processor]
    # The last value bound per processed column, and what it became: the rows of one batch share
    # most of their times (one transaction's `recorded_at`, one command's `occurred_at`).
    last: list[tuple[Any, Any]] = [(None, None)] * width
    last_rowid: int | None = None
    for chunk, size in padded_chunks(rows, per_statement):
        values: list[Any] = []
        for row in chunk:
            if len(row) != width:
                raise ValueError(f"rows for {table.name} name different columns: {sorted(row)}")
            try:
                row_values = [row[column] for column in columns]
            except KeyError:
                raise ValueError(f"rows for {table.name} name different columns: {sorted(row)}") from None
            for index, processor in processed:
                value = row_values[index]
                if value is not None:
                    known, bound = last[index]
                    if value is not known:
                        bound = processor(value)
                        last[index] = (value, bound)
                    row_values[index] = bound
            values += row_values
        values += [None] * (width * (size - len(chunk)))
        values.append(len(chunk))
        text = _sqlite_insert_text(dialect, table, columns, size, on_conflict)
        _rows, last_rowid = _sqlite_execute(session, text, tuple(values))
    return last_rowid


def padded_chunks(items: Sequence[_T], most: int) -> Iterator[tuple[Sequence[_T], int]]:
    """`items` in consecutive chunks of `most` (a power of two), the last one shorter, each with the
    size its statement is built for: `most`, and for the last the smallest power of two at least
    its length. A statement per chunk with one placeholder group per item, padded to that size (by
    the caller: rows of NULLs a LIMIT cuts off, a key repeated), then has a few texts only, which
    stay in the driver's statement cache, and at most `most` items are one statement."""
    for start in range(0, len(items), most):
        chunk = items[start : start + most]
        yield chunk, padded_size(len(chunk))


def padded_size(count: int) -> int:
    """The size a statement for `count` items (at least one) is built for: the smallest power of
    two at least `count` (see `padded_chunks`)."""
    return 1 << (count - 1).bit_length()


def padded_by_repeating(chunk: Sequence[_T], size: int) -> list[_T]:
    """`chunk` padded to `size` items by repeating its first (for a statement whose answer a
    repeated item does not change: a key looked up twice, a version checked twice)."""
    return [*chunk, *[chunk[0]] * (size - len(chunk))]


def _power_of_two_at_most(count: int) -> int:
    return 1 << (count.bit_length() - 1)


_SQLITE_INSERT_TEXTS: dict[tuple[str, tuple[str, ...], int, tuple[str, ...]], str] = {}
_BindProcessors = tuple[tuple[str, Callable[[Any], Any] | None], ...]
_SQLITE_PROCESSORS: dict[tuple[str, tuple[str, ...]], _BindProcessors] = {}


def _sqlite_insert_text(
    dialect: sqlalchemy.Dialect,
    table: sqlalchemy.Table,
    columns: tuple[str, ...],
    count: int,
    on_conflict: tuple[str, ...],
) -> str:
    cache_key = (table.name, columns, count, on_conflict)
    text = _SQLITE_INSERT_TEXTS.get(cache_key)
    if text is None:
        quote = dialect.identifier_preparer.quote
        names = ", ".join(quote(column) for column in columns)
        row = "(" + ", ".join("?" * len(columns)) + ")"
        text = (
            f"INSERT INTO {dialect.identifier_preparer.format_table(table)} ({names}) SELECT * FROM (VALUES "
        )
        text += ", ".join([row] * count) + ") WHERE true LIMIT ?"  # WHERE: the upsert's, see SQLite's docs
        if on_conflict:
            updates = [column for column in columns if column not in on_conflict]
            text += f" ON CONFLICT ({', '.join(quote(column) for column in on_conflict)}) DO UPDATE SET "
            text += ", ".join(f"{quote(column)} = excluded.{quote(column)}" for column in updates)
        text = _SQLITE_INSERT_TEXTS.setdefault(cache_key, text)
    return text


def _sqlite_bind_processors(
    dialect: sqlalchemy.Dialect, table: sqlalchemy.Table, columns: tuple[str, ...]
) -> _BindProcessors:
    key = (table.name, columns)
    processors = _SQLITE_PROCESSORS.get(key)
    if processors is None:
        built = []
        for column in columns:
            if column not in table.c:
                raise ValueError(f"{table.name} has no column {column!r}")
            column_type = table.c[column].type
            processor = (
                None
                if isinstance(column_type, sqlalchemy.LargeBinary)
                else column_type.dialect_impl(dialect).bind_processor(dialect)
            )
            built.append((column, processor))
        processors = _SQLITE_PROCESSORS.setdefault(key, tuple(built))
    return processors


_COPY_STATEMENTS: dict[tuple[str, tuple[str, ...]], str] = {}
_INSERT_STATEMENTS: dict[sqlalchemy.Table, sqlalchemy.Insert] = {}


def _insert_statement(table: sqlalchemy.Table) -> sqlalchemy.Insert:
    """The table's INSERT, built once: SQLAlchemy memoizes a statement's cache key on the object,
    so a statement built anew per call pays for that key every time."""
    statement = _INSERT_STATEMENTS.get(table)
    if statement is None:
        statement = _INSERT_STATEMENTS.setdefault(table, table.insert())
    return statement


def _copy_statement(dialect: sqlalchemy.Dialect, table: sqlalchemy.Table, columns: tuple[str, ...]) -> str:
    key = (table.name, columns)
    statement = _COPY_STATEMENTS.get(key)
    if statement is None:
        preparer = dialect.identifier_preparer
        for column in columns:
            assert column in table.c, (table.name, column)
        names = ", ".join(preparer.quote(column) for column in columns)
        statement = _COPY_STATEMENTS.setdefault(
            key, f"COPY {preparer.format_table(table)} ({names}) FROM STDIN"
        )
    return statement
