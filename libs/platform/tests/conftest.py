"""Fixtures shared by the platform tests: databases migrated with the example alembic history."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
import sqlalchemy
from mahjong_platform.database import create_engine_for, sqlite_url
from mahjong_platform.migrations import upgrade
from sqlalchemy.engine import Engine

ALEMBIC_EXAMPLE_DIRECTORY = pathlib.Path(__file__).parent / "alembic_example"

# Mirrors the example history's revision 0002, for queries in tests.
_example_metadata = sqlalchemy.MetaData()
EXAMPLE_PROJECTION = sqlalchemy.Table(
    "example_projection",
    _example_metadata,
    sqlalchemy.Column("id", sqlalchemy.Integer, primary_key=True, autoincrement=True),
    sqlalchemy.Column("event_id", sqlalchemy.String(36), nullable=False),
    sqlalchemy.Column("stream_id", sqlalchemy.String(200), nullable=False),
    sqlalchemy.Column("sequence", sqlalchemy.BigInteger, nullable=False),
    sqlalchemy.Column("topic", sqlalchemy.String(249), nullable=False),
    sqlalchemy.Column("partition", sqlalchemy.Integer, nullable=False),
    sqlalchemy.Column("kafka_offset", sqlalchemy.BigInteger, nullable=False),
)


@pytest.fixture
def alembic_example_directory() -> pathlib.Path:
    """The example service migration history (platform tables + one projection table)."""
    return ALEMBIC_EXAMPLE_DIRECTORY


@pytest.fixture
def example_projection() -> sqlalchemy.Table:
    """The example projection table the consumer tests write to (no unique key on event id)."""
    return EXAMPLE_PROJECTION


@pytest.fixture
def sqlite_database_url(tmp_path: pathlib.Path) -> str:
    """A SQLite file in this test's temporary data directory (not created yet)."""
    return sqlite_url(tmp_path / "data", "example")


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.integration),
    ]
)
def database_url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    """A fresh empty database, once per backend: SQLite and the real PostgreSQL."""
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "data", "example")
    url: str = request.getfixturevalue("postgres_database_url")
    return url


def _migrated_engine(url: str) -> Iterator[Engine]:
    upgrade(url, ALEMBIC_EXAMPLE_DIRECTORY)
    engine = create_engine_for(url)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def migrated_engine(database_url: str) -> Iterator[Engine]:
    """An engine on a database migrated to the example history's head (SQLite and PostgreSQL)."""
    yield from _migrated_engine(database_url)


@pytest.fixture
def sqlite_engine(sqlite_database_url: str) -> Iterator[Engine]:
    """An engine on a migrated SQLite database (the embedded default)."""
    yield from _migrated_engine(sqlite_database_url)


@pytest.fixture
def postgresql_engine(postgres_database_url: str) -> Iterator[Engine]:
    """An engine on a migrated, fresh database in the real PostgreSQL."""
    yield from _migrated_engine(postgres_database_url)
