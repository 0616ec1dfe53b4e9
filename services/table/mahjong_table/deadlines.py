"""Deadlines and disconnections: the server acts for players who do not (issue 4, RULES.md 1.10).

Polls the live tables' status rows: where a deadline passed, `ExpireDeadline` lets the domain act
for whoever is waited on (recorded as `TurnTimedOut` + the automatic action, so replays never
depend on clocks); where a seated player has had no Watch stream open for longer than the room's
`reconnect_grace_ms`, the player escapes (`Leave`, reason "disconnected").

With replicas, each fires the timers of the tables it owns only (`ownership`): a replica that takes
over a partition finds its tables' deadlines in their status rows, so every game still ends.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
import typing
from collections.abc import Callable, Sequence

import sqlalchemy
from mahjong_platform import driver_sql
from mahjong_platform.database import (
    SessionFactory,
    padded_by_repeating,
    padded_size,
    read_transaction,
    sqlite_rows,
    transaction,
)
from mahjong_platform.envelopes import Clock
from sqlalchemy.orm import Session

from mahjong_table.core.commands import ExpireDeadline, Leave, TableCommand
from mahjong_table.core.errors import TableRuleError
from mahjong_table.core.events import LEAVE_REASON_DISCONNECTED
from mahjong_table.models import table_status
from mahjong_table.ownership import Ownership
from mahjong_table.servicer import Presence
from mahjong_table.tables import TableEngine, TableMovedError
from mahjong_table.variants import AnyTableState as TableState

logger = logging.getLogger(__name__)

CommandFor = Callable[[TableState], TableCommand]
_Row = typing.TypeVar("_Row", bound=tuple[typing.Any, ...])

POLL_INTERVAL_SECONDS = 0.1
"""The shortest pause between two looks at the store (a deadline known here fires at most this
late, as when the worker looked ten times a second)."""
SWEEP_INTERVAL_SECONDS = 0.5
"""The longest: a deadline this process does not know (written before a restart, or by the
replica it took a table over from) fires at most this late."""
WAIT_SLICE_SECONDS = 0.25
"""A wait is cut in slices this long to see the stop event (one look at two events, no query)."""
PRESENCE_CHECK_INTERVAL_SECONDS = 1.0
EXPIRED_TABLES_PER_POLL = 200


class _Superseded(Exception):
    """The table moved on since its deadline was read: the deadline no longer applies."""


class DeadlineWorker:
    """A background worker (see `service_runtime.Worker`)."""

    def __init__(
        self,
        session_factory: SessionFactory,
        engine: TableEngine,
        presence: Presence,
        clock: Clock,
        ownership: Ownership | None = None,
    ) -> None:
        self._session_factory = session_factory
        self._engine = engine
        self._presence = presence
        self._clock = clock
        self._ownership = ownership  # None: one process owns every table
        self._last_presence_check = 0.0

    def run_forever(self, stop_event: threading.Event) -> None:
        """Look at the store when a deadline this process knows is due (`TableEngine.next_deadline`,
        woken by a commit that writes an earlier one: `TableEngine.deadline_alarm`), and every
        SWEEP_INTERVAL_SECONDS for the others, never twice within POLL_INTERVAL_SECONDS. It used to
        look ten times a second whatever was due: 60% of the table process's CPU while idle."""
        engine = self._engine
        while not stop_event.is_set():
            looked, looked_at = time.monotonic(), self._clock()
            self.run_once()
            engine.forget_ended()  # an idle process too forgets the tables that ended
            while not stop_event.is_set():
                now = self._clock()
                due = engine.next_deadline(looked_at)
                seconds = seconds_to_wait(time.monotonic() - looked, due, now)
                if seconds <= 0:
                    break
                # Rung by a commit writing a deadline before this wait ends; a commit between the
                # look above and the arming changed the next deadline: work the wait out again.
                alarm = engine.deadline_alarm(now + datetime.timedelta(seconds=seconds))
                if engine.next_deadline(looked_at) != due:
                    continue
                alarm.wait(min(seconds, WAIT_SLICE_SECONDS))
            engine.deadline_alarm(None)

    def close(self) -> None:
        """Nothing to release."""

    def run_once(self) -> int:
        """Expire every passed deadline, and (once a second) escape disconnected players."""
        acted = self.expire_deadlines()
        if time.monotonic() - self._last_presence_check >= PRESENCE_CHECK_INTERVAL_SECONDS:
            self._last_presence_check = time.monotonic()
            acted += self.escape_disconnected()
        return acted

    def _owned(
        self, query: sqlalchemy.Select[_Row], owned_query: sqlalchemy.Select[_Row]
    ) -> tuple[sqlalchemy.Select[_Row], dict[str, object]]:
        """The statement for the tables this worker acts on, and its parameters."""
        if self._ownership is None:
            return query, {}
        return owned_query, {"owned_partitions": sorted(self._ownership.owned())}

    def expire_deadlines(self) -> int:
        with read_transaction(self._session_factory) as session:
            expired = self._expired(session)
        acted = 0
        for table_id, version in expired:
            acted += self._act(table_id, _expire_at_version(version))
        return acted

    def _expired(self, session: Session) -> list[tuple[str, int]]:
        """(table id, version) of the tables this worker acts on whose deadline has passed, oldest
        deadline first. On SQLite on the driver's cursor (`sqlite_rows`): SQLAlchemy's execution
        of the query, ten times a second, cost about a millisecond of the GIL each time (its
        expanding IN of the owned partitions rendered anew at every execution)."""
        now = self._clock()
        connection = session.connection()
        if connection.dialect.name == "sqlite":
            partitions = None if self._ownership is None else sorted(self._ownership.owned())
            text, values = _expired_sqlite(driver_sql.timestamp(connection, now), partitions)
            return [(str(table_id), int(version)) for table_id, version in sqlite_rows(session, text, values)]
        statement, parameters = self._owned(_EXPIRED, _EXPIRED_OWNED)
        rows = session.execute(statement, {"now": now, "expired_max": EXPIRED_TABLES_PER_POLL, **parameters})
        return [(row.table_id, row.version) for row in rows]

    def escape_disconnected(self) -> int:
        with read_transaction(self._session_factory) as session:
            live = (
                self._engine.live_tables(session)
                if self._ownership is None
                else list(session.execute(*self._owned(_LIVE, _LIVE_OWNED)).scalars())
            )
            states = []
            for table_id in live:
                try:
                    states.append(self._engine.load_state(session, table_id, for_reading=True))
                except TableMovedError:
                    continue  # its partition was taken away since the query: not ours to act on
        self._presence.keep_only(live)
        acted = 0
        for state in states:
            grace_seconds = state.rules.reconnect_grace_ms / 1000
            for seat in state.seats_in_game():
                if self._presence.away_seconds(state.table_id, seat) > grace_seconds:
                    acted += self._act(state.table_id, _leave(seat))
        return acted

    def _act(self, table_id: str, command_for: CommandFor) -> int:
        try:
            self._engine.act(lambda: transaction(self._session_factory), table_id, command_for)
        except (_Superseded, TableRuleError, TableMovedError) as reason:
            logger.debug("table %s: automatic action skipped: %s", table_id, reason)
            return 0
        return 1


def seconds_to_wait(
    since_looked: float, next_deadline: datetime.datetime | None, now: datetime.datetime
) -> float:
    """How much longer the worker waits before it looks at the store again, `since_looked`
    seconds after it last did: until the next deadline it knows (`next_deadline`, by the worker's
    clock `now`), at least POLL_INTERVAL_SECONDS after the last look (a deadline the store no
    longer holds, say one superseded, is not asked about in a loop) and at most
    SWEEP_INTERVAL_SECONDS after it."""
    until_sweep = SWEEP_INTERVAL_SECONDS - since_looked
    if next_deadline is None:
        return until_sweep
    until_due = max((next_deadline - now).total_seconds(), POLL_INTERVAL_SECONDS - since_looked)
    return min(until_sweep, until_due)


def _of_owned_partitions(query: sqlalchemy.Select[_Row]) -> sqlalchemy.Select[_Row]:
    """`query` for the tables of this replica's partitions (the list parameter
    ``owned_partitions``) and those opened before partitions were recorded (NULL: any replica may
    act on them, one action each by version)."""
    column = table_status.c.match_partition
    owned = column.in_(sqlalchemy.bindparam("owned_partitions", expanding=True))
    return query.where(sqlalchemy.or_(owned, column.is_(None)))


# Built once: a statement built per poll paid for its construction and cache key ten times a second.
_EXPIRED = (
    sqlalchemy.select(table_status.c.table_id, table_status.c.version)
    .where(table_status.c.ended.is_(False), table_status.c.deadline_at <= sqlalchemy.bindparam("now"))
    .order_by(table_status.c.deadline_at)
    .limit(sqlalchemy.bindparam("expired_max"))
)
_EXPIRED_OWNED = _of_owned_partitions(_EXPIRED)
_LIVE = sqlalchemy.select(table_status.c.table_id).where(table_status.c.ended.is_(False))
_LIVE_OWNED = _of_owned_partitions(_LIVE)


def _expired_sqlite(now: object, partitions: Sequence[int] | None) -> tuple[str, tuple[object, ...]]:
    """`_EXPIRED` (`partitions` None) or `_EXPIRED_OWNED` as SQLite text and its values: the time
    bound `now` as bound for the column (`driver_sql.timestamp`), the owned partitions padded to a
    power of two by repeating one (a few texts, cached by the driver)."""
    values: tuple[object, ...] = (now,)
    owned = ""
    if partitions is not None:
        count = padded_size(len(partitions)) if partitions else 0
        owned = _OWNED_SQLITE.format(", ".join("?" * count))
        values += tuple(padded_by_repeating(partitions, count)) if partitions else ()
    return _EXPIRED_SQLITE.format(owned), (*values, EXPIRED_TABLES_PER_POLL)


_EXPIRED_SQLITE = (
    "SELECT table_id, version FROM table_status WHERE ended = 0 AND deadline_at <= ?{}"
    " ORDER BY deadline_at LIMIT ?"
)
_OWNED_SQLITE = " AND (match_partition IN ({}) OR match_partition IS NULL)"


def _leave(seat: int) -> CommandFor:
    def command_for(_state: TableState) -> TableCommand:
        return Leave(seat, LEAVE_REASON_DISCONNECTED)

    return command_for


def _expire_at_version(version: int) -> CommandFor:
    def command_for(state: TableState) -> TableCommand:
        if state.version != version:
            raise _Superseded(f"table is at version {state.version}, the deadline was for {version}")
        return ExpireDeadline()

    return command_for
