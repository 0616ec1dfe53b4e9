"""Fixtures of the ledger tests: migrated databases (SQLite and the real PostgreSQL), the
repository and projection wired as in production, and builders for settlement envelopes."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from mahjong_ledger.app import migrate
from mahjong_ledger.projection import SettlementProjection
from mahjong_ledger.repository import LedgerRepository
from mahjong_ledger.testing import FIXED_TIME
from mahjong_platform.database import SessionFactory, create_engine_for, create_session_factory, sqlite_url
from mahjong_platform.event_store import EventStore
from mahjong_platform.topics import Topics
from sqlalchemy.engine import Engine


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """An engine on a database migrated to the ledger's newest revision."""
    migrate(database_url)
    engine = create_engine_for(database_url)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def sqlite_engine(tmp_path: pathlib.Path) -> Iterator[Engine]:
    """A migrated SQLite ledger database only (for tests about one process, not the backends)."""
    url = sqlite_url(tmp_path / "data", "ledger")
    migrate(url)
    engine = create_engine_for(url)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def postgresql_engine(postgres_database_url: str) -> Iterator[Engine]:
    """A migrated ledger database in the real PostgreSQL only (replicas, row locks, Kafka runs)."""
    migrate(postgres_database_url)
    engine = create_engine_for(postgres_database_url)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def session_factory(engine: Engine) -> SessionFactory:
    return create_session_factory(engine)


@pytest.fixture
def repository() -> LedgerRepository:
    return LedgerRepository(EventStore(topics=Topics.with_prefix("test.")), clock=lambda: FIXED_TIME)


@pytest.fixture
def projection(repository: LedgerRepository) -> SettlementProjection:
    return SettlementProjection(repository)
