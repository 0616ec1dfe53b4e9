"""A service's own hot statements as SQL texts written once, run on the driver's cursor of the
caller's SQLAlchemy connection (in its transaction), instead of SQLAlchemy statements (matchmaking's
Enqueue, the ledger's GetBalance and settlement batches).

A small statement through `Session.execute` cost about 100-170 us of Python on this project's box
(compiled-cache look-up, parameter processing, result metadata), on the driver's cursor about
10 us. What SQLAlchemy did around them is kept:

- the engine's ``before_cursor_execute`` listeners are told of each statement (the query-plan
  audit, `mahjong_platform.query_plans`, records what the hot path runs);
- a driver error is raised as SQLAlchemy's (`sqlalchemy.exc.IntegrityError` for a unique key,
  `OperationalError` for a lost connection, which the connection is invalidated for), through the
  connection's own handling;
- a timestamp is bound as SQLAlchemy's ``DateTime`` binds it: on SQLite the same text, so rows
  written here and rows written through SQLAlchemy read back and sort alike.

One text per dialect: SQLite's ``?`` parameters become psycopg's ``%s`` on PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from typing import Any

import sqlalchemy


@dataclasses.dataclass(frozen=True, slots=True)
class Sql:
    """A statement's text for SQLite (``?`` parameters) and for PostgreSQL (``%s``)."""

    sqlite: str
    postgresql: str

    @classmethod
    def of(cls, text: str) -> Sql:
        assert "%" not in text, text
        return cls(text, text.replace("?", "%s"))


def run(connection: sqlalchemy.Connection, sql: Sql, parameters: Sequence[Any] = ()) -> Any:
    """Execute `sql` with positional `parameters` on the connection's driver cursor (in its
    transaction); the cursor, to fetch from."""
    text = sql.sqlite if connection.dialect.name == "sqlite" else sql.postgresql
    return _execute(connection, text, parameters, many=False)


def run_many(connection: sqlalchemy.Connection, sql: Sql, rows: Sequence[Sequence[Any]]) -> None:
    """`run` for many parameter rows (the driver's executemany)."""
    text = sql.sqlite if connection.dialect.name == "sqlite" else sql.postgresql
    _execute(connection, text, rows, many=True)


def timestamp(connection: sqlalchemy.Connection, moment: datetime.datetime) -> object:
    """`moment` as SQLAlchemy's ``DateTime(timezone=True)`` binds it: the datetime on PostgreSQL;
    on SQLite its text (SQLAlchemy's storage format, without the offset: everything stored is UTC)."""
    if connection.dialect.name != "sqlite":
        return moment
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d} "
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}.{moment.microsecond:06d}"
    )


def _execute(connection: sqlalchemy.Connection, text: str, parameters: Any, *, many: bool) -> Any:
    dispatch = connection.dispatch
    if dispatch.before_cursor_execute:
        for listener in dispatch.before_cursor_execute:
            listener(connection, None, text, parameters, None, many)
    driver_connection: Any = connection.connection.driver_connection
    cursor = driver_connection.cursor()
    try:
        if many:
            cursor.executemany(text, parameters)
        else:
            cursor.execute(text, parameters)
    except Exception as error:
        connection._handle_dbapi_exception(error, text, parameters, cursor, None)
    return cursor
