"""Fixtures of the scoring tests: a migrated SQLite scoring database."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from mahjong_platform.database import SessionFactory, create_engine_for, create_session_factory, sqlite_url
from mahjong_platform.migrations import upgrade
from sqlalchemy.engine import Engine

SCORING_MIGRATIONS = "mahjong_scoring:alembic"


def migrated_engine(url: str) -> Engine:
    """An engine on a database migrated to the newest scoring revision."""
    upgrade(url, SCORING_MIGRATIONS)
    return create_engine_for(url)


@pytest.fixture
def scoring_engine(tmp_path: pathlib.Path) -> Iterator[Engine]:
    """A fresh, migrated SQLite scoring database."""
    engine = migrated_engine(sqlite_url(tmp_path / "data", "scoring"))
    yield engine
    engine.dispose()


@pytest.fixture
def session_factory(scoring_engine: Engine) -> SessionFactory:
    """Sessions on the scoring database."""
    return create_session_factory(scoring_engine)
