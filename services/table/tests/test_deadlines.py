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


def test_the_worker_waits_for_the_next_deadline_it_knows_between_a_poll_and_a_sweep() -> None:
    """`seconds_to_wait`: until the next known deadline, never sooner than POLL_INTERVAL_SECONDS
    after the last look (a deadline the store does not confirm is not asked about in a loop),
    never later than SWEEP_INTERVAL_SECONDS after it (the deadlines this process does not know)."""
    poll, sweep = deadlines.POLL_INTERVAL_SECONDS, deadlines.SWEEP_INTERVAL_SECONDS
    seconds = datetime.timedelta(seconds=1)
    wait = deadlines.seconds_to_wait
    assert wait(0.0, None, NOW) == sweep  # nothing known: the sweep
    assert wait(0.2, None, NOW) == pytest.approx(sweep - 0.2)
    assert wait(0.0, NOW + 60 * seconds, NOW) == sweep  # known, but after the sweep
    assert wait(0.0, NOW + 0.3 * seconds, NOW) == pytest.approx(0.3)  # known: then
    assert wait(0.0, NOW + 0.01 * seconds, NOW) == pytest.approx(poll)  # not twice within the poll interval
    assert wait(0.0, NOW - 60 * seconds, NOW) == pytest.approx(poll)  # passed and still known: every poll
    assert wait(poll, NOW - 60 * seconds, NOW) <= 0  # ... look now
    assert wait(sweep, None, NOW) <= 0


def test_a_commit_with_a_deadline_before_the_workers_next_look_rings_its_alarm(
    table_server: TableServer,
) -> None:
    engine = table_server.engine
    soon = utc_now() + datetime.timedelta(seconds=30)
    alarm = engine.deadline_alarm(soon)
    table_server.open_table(PLAYERS, turn_timeout_ms=120_000)  # its deadline after the next look
    assert not alarm.is_set()
    table_id = table_server.open_table(PLAYERS, turn_timeout_ms=1_000)
    assert alarm.is_set()
    next_deadline = engine.next_deadline()
    assert next_deadline is not None and next_deadline < soon
    assert engine.known_deadline(engine.cache.get(table_id)) == (True, next_deadline)  # type: ignore[arg-type]
    assert not engine.deadline_alarm(None).is_set()  # cleared; None: no alarm
    table_server.open_table(PLAYERS, turn_timeout_ms=0)
    assert not alarm.is_set()


def test_a_worker_between_sweeps_is_woken_by_the_deadlines_its_process_writes(
    table_server: TableServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sweeps and wait slices an hour apart: a table opened while the worker waits (its first turn
    timing out at once, 0 ms) rings its alarm, and the worker then plays it to its end by the
    deadlines its own actions write (seen at its next look, `next_deadline`)."""
    import threading

    monkeypatch.setattr(deadlines, "SWEEP_INTERVAL_SECONDS", 3_600.0)
    monkeypatch.setattr(deadlines, "WAIT_SLICE_SECONDS", 3_600.0)
    monkeypatch.setattr(deadlines, "POLL_INTERVAL_SECONDS", 0.0)
    worker = DeadlineWorker(table_server.session_factory, table_server.engine, Presence(), utc_now)  # type: ignore[arg-type]
    stop = threading.Event()
    thread = threading.Thread(target=worker.run_forever, args=(stop,), daemon=True)
    thread.start()
    try:
        for _ in range(6_000):  # the worker looked once and waits, armed
            if table_server.engine._alarm_before is not None:
                break
            stop.wait(0.01)
        table_id = table_server.open_table(PLAYERS, turn_timeout_ms=0)
        for _ in range(6_000):
            state = table_server.engine.cache.get(table_id)
            if state is not None and state.is_over:
                break
            stop.wait(0.01)
        assert table_server.view("east", table_id).phase == "ended"
    finally:
        stop.set()
        table_server.open_table(PLAYERS, turn_timeout_ms=0)  # its deadline rings the alarm: it stops
        thread.join(30)
    assert not thread.is_alive()


def test_a_deadline_the_last_look_found_nothing_to_do_for_is_not_asked_about_again(
    table_server: TableServer,
) -> None:
    """`next_deadline(after)`: a deadline at or before the worker's last look (its table moved on,
    or to another replica, and the store did not return it) does not keep the worker looking at
    every poll; the sweep still looks at the store."""
    engine = table_server.engine
    table_server.open_table(PLAYERS, turn_timeout_ms=0)  # due at once
    due = engine.next_deadline()
    assert due is not None
    assert engine.next_deadline(due - datetime.timedelta(milliseconds=1)) == due
    assert engine.next_deadline(due) is None
    later = table_server.open_table(PLAYERS, turn_timeout_ms=60_000)
    later_state = engine.cache.get(later)
    assert later_state is not None
    assert engine.next_deadline(due) == engine.known_deadline(later_state)[1]
