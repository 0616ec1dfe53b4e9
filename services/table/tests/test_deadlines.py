"""The deadline worker's query of the passed deadlines: on SQLite it runs as text on the driver's
cursor, and finds exactly what the SQLAlchemy statement finds (the live tables of the owned
partitions and of none, oldest deadline first, at most EXPIRED_TABLES_PER_POLL)."""

from __future__ import annotations

import datetime

import pytest
from mahjong_platform.database import read_transaction, transaction
from mahjong_platform.envelopes import utc_now
from mahjong_table import deadlines
from mahjong_table.deadlines import DeadlineWorker
from mahjong_table.models import table_status
from mahjong_table.servicer import Presence
from sqlalchemy.orm import Session

from .conftest import TableServer

PLAYERS = ["east", "south", "west", "north"]
NOW = (utc_now() + datetime.timedelta(days=366)).replace(microsecond=0)
"""The worker's clock, a year ahead of the wall clock: every deadline below is in the wall clock's
future, so a query that read the wall clock instead of the worker's would find none (`assert found`)."""


class _Owner:
    def __init__(self, partitions: frozenset[int]) -> None:
        self._partitions = partitions

    def owned(self) -> frozenset[int]:
        return self._partitions


def _by_sqlalchemy(worker: DeadlineWorker, session: Session) -> list[tuple[str, int]]:
    statement, parameters = worker._owned(deadlines._EXPIRED, deadlines._EXPIRED_OWNED)
    rows = session.execute(
        statement, {"now": NOW, "expired_max": deadlines.EXPIRED_TABLES_PER_POLL, **parameters}
    )
    return [(row.table_id, row.version) for row in rows]


@pytest.mark.parametrize("owned", [None, frozenset(), frozenset({1}), frozenset({0, 1, 2})])
def test_the_sqlite_query_finds_what_the_statement_finds(
    table_server: TableServer, owned: frozenset[int] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deadlines, "EXPIRED_TABLES_PER_POLL", 5)
    # Deadlines a minute apart around NOW, in partitions 0, 1, 2 and none; some ended, one waits on nobody.
    tables = []
    for index in range(12):
        table_id = table_server.open_table(PLAYERS, match_partition=[0, 1, 2, None][index % 4])
        deadline = None if index == 7 else NOW + datetime.timedelta(minutes=5 - index)
        with transaction(table_server.session_factory) as session:  # type: ignore[arg-type]
            session.execute(
                table_status.update()
                .where(table_status.c.table_id == table_id)
                .values(deadline_at=deadline, ended=index == 9)
            )
        tables.append(table_id)
    owner = None if owned is None else _Owner(owned)
    worker = DeadlineWorker(table_server.session_factory, table_server.engine, Presence(), lambda: NOW, owner)  # type: ignore[arg-type]
    with read_transaction(table_server.session_factory) as session:  # type: ignore[arg-type]
        expected = _by_sqlalchemy(worker, session)
        found = worker._expired(session)
    assert found == expected
    assert found  # every case finds some (partition-less tables are anyone's)
    assert len(found) <= 5
    assert all(tables.index(table_id) >= 5 and tables.index(table_id) not in (7, 9) for table_id, _ in found)
