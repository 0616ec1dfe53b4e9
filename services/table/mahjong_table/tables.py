"""The table engine's use cases: open a table, act on it, expire its deadline, read it.

Each use case loads the table's state (folded from its event stream, cached per table), asks the
pure domain for events, and appends them with the version it decided on, in one transaction with
the outbox and the table's status row. A lost race re-decides on the fresh state (the domain is
pure, so that is always safe); a rule violation raises and nothing is written.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import functools
import threading
import time
import typing
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager

import sqlalchemy
from mahjong.v1 import envelope_pb2, match_events_pb2
from mahjong_platform.database import (
    insert_rows,
    padded_by_repeating,
    padded_chunks,
    padded_size,
    sqlite_rows,
    upsert_rows,
)
from mahjong_platform.envelopes import Clock, as_utc, datetime_of, new_envelopes
from mahjong_platform.errors import ConflictError, NotFoundError, UnavailableError
from mahjong_platform.event_store import (
    ConditionUnmetError,
    EventStore,
    SqlCondition,
    WrongExpectedVersionError,
    versions_differing_sqlite,
)
from mahjong_platform.idempotency import replay_answer
from sqlalchemy.orm import Session

from mahjong_table import codec
from mahjong_table.core.commands import TableCommand
from mahjong_table.core.events import GameEnded, TableEvent
from mahjong_table.models import table_answers, table_status
from mahjong_table.variants import AnyTableState as TableState
from mahjong_table.variants import execute, fold, open_table, waited_on
from mahjong_table.visibility import unseen_by_the_asked

CACHED_TABLES_MAX = 10_000
DECIDE_ATTEMPTS_MAX = 5
RECENT_EVENTS_PER_TABLE = 128
RECENT_EVENTS_TABLES_MAX = 1_000
FORGOTTEN_TABLES_KEPT = 4_096
ENDED_TABLES_KEPT_SECONDS = 10.0
"""How long a process keeps a table in memory after its game ended (its state, event tail, version
and deadline): long enough for every seat's feed to send the end. A later read (a late `GetView`, an
operator's `Watch`) reads the store, as for any table not in memory. Before, every table ever
played stayed: its version and deadline for good, its state and tail until the caches' bounds
(10,000 and 1,000 tables), about 345 KB a game (the table process grew 97 -> 362 MB over a
768-game `make bench-system` run)."""
MOVED_MESSAGE = "this table moved to another table-engine replica; retry or reconnect to continue"


class TableMovedError(UnavailableError):
    """The table's partition is no longer this replica's (`ownership`): it serves the table no
    more, so a stream ends and a command is refused (UNAVAILABLE: the client's retry reaches the
    new owner)."""

    def __init__(self) -> None:
        super().__init__(MOVED_MESSAGE)


class TableChanges:
    """Wakes the Watch streams of one table in this process when its stream grows.

    One condition per table a thread waits on (all sharing one lock, made by its first `wait`):
    a change wakes that table's watchers only, not every stream the process serves. An ended
    table's condition is dropped once its watchers are woken."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: dict[str, int] = {}
        self._conditions: dict[str, threading.Condition] = {}
        self._listeners: list[Callable[[Sequence[str]], None]] = []

    def add_listener(self, listener: Callable[[Sequence[str]], None]) -> None:
        """Also call `listener(table_ids)` after every change, once for the tables of a group
        commit (from the notifying thread; an asyncio server hands them to its event loop at
        once, one wake-up of the loop per commit)."""
        with self._lock:
            self._listeners.append(listener)

    def _condition(self, table_id: str) -> threading.Condition:
        condition = self._conditions.get(table_id)
        if condition is None:
            condition = self._conditions[table_id] = threading.Condition(self._lock)
        return condition

    def notify(self, table_id: str, version: int, *, ended: bool = False) -> None:
        """Record `version` as committed (never lowering what is known: two commits of one table
        may be published out of order) and wake the table's watchers."""
        self.notify_many([(table_id, version, ended)])

    def notify_many(
        self, changes: Sequence[tuple[str, int, bool]], before_listeners: Callable[[], None] | None = None
    ) -> None:
        """`notify` for several tables, (table id, version, ended) each: the listeners are called
        once, with every table id, after `before_listeners()` (the versions are known by then)."""
        with self._lock:
            for table_id, version, ended in changes:
                self._versions[table_id] = max(version, self._versions.get(table_id, 0))
                # Only a table some thread waited on (`wait`) has a condition: the asyncio streams
                # wait through the listeners, so most commits make and notify none.
                condition = self._conditions.get(table_id)
                if condition is not None:
                    condition.notify_all()
                    if ended:  # the woken watchers still see the version; later waits make a new one
                        del self._conditions[table_id]
            listeners = list(self._listeners)
        if before_listeners is not None:
            before_listeners()
        table_ids = [table_id for table_id, _version, _ended in changes]
        for listener in listeners:
            listener(table_ids)

    def forget(self, table_ids: Collection[str]) -> None:
        """Forget the versions of `table_ids` (`TableEngine.forget_where`, `forget_ended`: an ended
        table gets no more commits, and a replica that lost a table or took it over reads it from
        the store; a state read from the store is as new as any version 0 allows)."""
        with self._lock:
            for table_id in table_ids:
                self._versions.pop(table_id, None)

    def table_ids(self) -> list[str]:
        """The tables whose version this process knows."""
        with self._lock:
            return list(self._versions)

    def version(self, table_id: str) -> int:
        """The latest version this process committed or was told about; 0 when none. Read
        without the lock: one look-up in a dict that `notify_many` changes under it (whole
        entries, each only ever raised) sees a version that was current at some moment then,
        as a read under the lock would; the feeds ask it at every wake-up."""
        return self._versions.get(table_id, 0)

    def wait(self, table_id: str, seen_version: int, timeout_seconds: float) -> None:
        with self._lock:
            self._condition(table_id).wait_for(
                lambda: self._versions.get(table_id, 0) > seen_version, timeout_seconds
            )


class StateCache:
    """The latest folded state per table, bounded (least recently used out), thread-safe.

    Only ever filled with states read from committed events, so a cache hit is a true prefix of
    the stream; `load_state` folds whatever came after it.
    """

    def __init__(self, capacity: int = CACHED_TABLES_MAX) -> None:
        self._states: collections.OrderedDict[str, TableState] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._capacity = capacity

    def get(self, table_id: str) -> TableState | None:
        """The table's cached state. Read without the lock (one look-up; `put` replaces whole
        entries under it), and without marking the table used: a state is put at every commit
        of its table, which marks it, and the feeds read it at every wake-up. So the table least
        recently committed or loaded goes first when the cache is full (a table only watched
        for a while is read from the store once more)."""
        return self._states.get(table_id)

    def put(self, state: TableState) -> None:
        with self._lock:
            current = self._states.get(state.table_id)
            if current is None or current.version <= state.version:
                self._states[state.table_id] = state
                self._states.move_to_end(state.table_id)
            while len(self._states) > self._capacity:
                self._states.popitem(last=False)

    def table_ids(self) -> list[str]:
        """The tables with a cached state."""
        with self._lock:
            return list(self._states)

    def discard(self, table_ids: Collection[str]) -> None:
        """Drop the states of `table_ids` (`TableEngine.forget_where`, `forget_ended`)."""
        with self._lock:
            for table_id in table_ids:
                self._states.pop(table_id, None)


class RecentEvents:
    """The last events this process committed per table (bounded per table, least recently used
    tables out), so Watch streams read new events from memory instead of querying the store once
    per watcher per change. Only filled after a commit; a batch older than the tail (two commits
    published out of order) is ignored, and a gap starts the table over, so the tail is always a
    gapless run of committed events.

    A table's tail is an immutable tuple that `add` replaces whole (under its lock), so `after`
    reads it with one look-up and no lock: the feeds read it at every wake-up, on the event loop,
    while the writer thread adds."""

    def __init__(
        self, per_table: int = RECENT_EVENTS_PER_TABLE, tables: int = RECENT_EVENTS_TABLES_MAX
    ) -> None:
        self._events: collections.OrderedDict[str, tuple[envelope_pb2.Envelope, ...]] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()
        self._per_table = per_table
        self._tables = tables

    def add(self, table_id: str, envelopes: Sequence[envelope_pb2.Envelope]) -> None:
        """Remember committed `envelopes` (sequences set) of `table_id`."""
        if not envelopes:
            return
        with self._lock:
            recent = self._events.get(table_id, ())
            if recent and envelopes[-1].sequence <= recent[-1].sequence:
                return  # published after a later commit of the table: already superseded
            if recent and recent[-1].sequence + 1 != envelopes[0].sequence:
                recent = ()
            self._events[table_id] = (*recent, *envelopes)[-self._per_table :]
            self._events.move_to_end(table_id)
            while len(self._events) > self._tables:
                self._events.popitem(last=False)

    def holds(self, table_id: str) -> bool:
        return table_id in self._events

    def table_ids(self) -> list[str]:
        """The tables with a tail in memory."""
        with self._lock:
            return list(self._events)

    def discard(self, table_ids: Collection[str]) -> None:
        """Forget the tails of `table_ids` (`TableEngine.forget_where`, `forget_ended`)."""
        with self._lock:
            for table_id in table_ids:
                self._events.pop(table_id, None)

    def after(
        self, table_id: str, after_sequence: int, up_to: int, limit: int
    ) -> list[envelope_pb2.Envelope] | None:
        """The events after `after_sequence` when memory holds every one of them up to `up_to`
        (the latest committed version); None when the store must be asked."""
        recent = self._events.get(table_id)
        if not recent or recent[0].sequence > after_sequence + 1 or recent[-1].sequence < up_to:
            return None
        start = max(after_sequence + 1 - recent[0].sequence, 0)
        return list(recent[start : start + limit])


@dataclasses.dataclass
class TableEngine:
    """The table use cases with their dependencies made explicit."""

    store: EventStore
    clock: Clock
    cache: StateCache = dataclasses.field(default_factory=StateCache)
    changes: TableChanges = dataclasses.field(default_factory=TableChanges)
    recent: RecentEvents = dataclasses.field(default_factory=RecentEvents)
    # Whether this replica owns a table (`ownership`); None: one process owns them all.
    owns: Callable[[str], bool] | None = None
    # Checks, first in every write transaction, that this replica still owns the tables it writes
    # (`Ownership.fence`): a replica that takes a table over never misses a previous owner's write.
    fence: Callable[[Session, Sequence[str]], None] | None = None
    # SQLite: the same check as a condition for the group commit's version check to ask in its own
    # statement (`Ownership.fence_condition`: `TableMovedError` when this replica knows better).
    fence_condition: Callable[[Sequence[str]], SqlCondition] | None = None
    # The deadline written with each table's latest version, so a view needs no extra query.
    _deadlines: dict[str, tuple[int, datetime.datetime | None]] = dataclasses.field(default_factory=dict)
    _deadlines_lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    # The tables whose game ended, with when this process saw it (`monotonic`), oldest first: each
    # is forgotten `ended_tables_kept_seconds` later (`forget_ended`; under `_deadlines_lock`).
    ended_tables_kept_seconds: float = ENDED_TABLES_KEPT_SECONDS
    monotonic: Callable[[], float] = time.monotonic
    _ended: collections.OrderedDict[str, float] = dataclasses.field(default_factory=collections.OrderedDict)
    # The last tables forgotten (at most FORGOTTEN_TABLES_KEPT): a commit of one published after
    # it was forgotten (two commits of a table published out of order, the earlier one paused
    # that long) is not put back in memory, where it would pass for the table's latest state.
    _forgotten: collections.OrderedDict[str, None] = dataclasses.field(
        default_factory=collections.OrderedDict
    )
    # The deadline worker's alarm (`deadline_alarm`): set by a commit whose deadline comes before
    # `_alarm_before`, the moment the worker looks at the store next anyway (None: not waiting).
    _deadline_alarm: threading.Event = dataclasses.field(default_factory=threading.Event)
    _alarm_before: datetime.datetime | None = None

    def deadline_of(
        self, session_scope: Callable[[], AbstractContextManager[Session]], state: TableState
    ) -> datetime.datetime | None:
        """When the server acts for whoever `state` waits on (None: nobody is waited on); the
        store is asked only when this process did not write the table's latest version."""
        if state.is_over:
            return None
        with self._deadlines_lock:
            known = self._deadlines.get(state.table_id)
        if known is not None and known[0] == state.version:
            return known[1]
        with session_scope() as session:
            deadline = session.execute(
                sqlalchemy.select(table_status.c.deadline_at).where(table_status.c.table_id == state.table_id)
            ).scalar_one_or_none()
        return None if deadline is None else typing.cast(datetime.datetime, deadline)

    def check_owned(self, table_id: str) -> None:
        """`TableMovedError` unless this replica owns the table (every read and write asks)."""
        if self.owns is not None and not self.owns(table_id):
            raise TableMovedError

    def cached_state(self, table_id: str) -> TableState | None:
        """The table's state when the cache holds everything this process committed of it."""
        self.check_owned(table_id)
        cached = self.cache.get(table_id)
        if cached is not None and cached.version >= self.changes.version(table_id):
            return cached
        return None

    def forget_where(self, stale: Callable[[str], bool]) -> None:
        """Drop everything kept in memory of the tables `stale(table_id)` names (states, event
        tails, versions, deadlines): another replica may have written them, or a takeover moved
        their deadlines, or they are another replica's now (`ownership`)."""
        with self._deadlines_lock:
            known = {*self._deadlines, *self._ended}
        known.update(self.cache.table_ids(), self.recent.table_ids(), self.changes.table_ids())
        self._forget([table_id for table_id in known if stale(table_id)])

    def _forget(self, table_ids: Collection[str]) -> None:
        """Drop everything kept in memory of `table_ids` (`forget_where`, `forget_ended`)."""
        with self._deadlines_lock:
            for table_id in table_ids:
                self._deadlines.pop(table_id, None)
                self._ended.pop(table_id, None)
        self.cache.discard(table_ids)
        self.recent.discard(table_ids)
        self.changes.forget(table_ids)

    def known_deadline(self, state: TableState) -> tuple[bool, datetime.datetime | None]:
        """(True, deadline) when this process wrote `state`'s version, or the game is over (no
        deadline); (False, None) otherwise."""
        if state.is_over:
            return True, None
        with self._deadlines_lock:
            known = self._deadlines.get(state.table_id)
        if known is not None and known[0] == state.version:
            return True, known[1]
        return False, None

    def recent_events_after(
        self, table_id: str, after_sequence: int, limit: int, *, at_least_up_to: int = 0
    ) -> list[envelope_pb2.Envelope] | None:
        """`events_after` from memory alone; None when the store must be asked."""
        self.check_owned(table_id)
        up_to = max(self.changes.version(table_id), at_least_up_to)
        return self.recent.after(table_id, after_sequence, up_to, limit)

    def read_state(
        self, session_scope: Callable[[], AbstractContextManager[Session]], table_id: str
    ) -> TableState:
        """`load_state(for_reading=True)` that opens a (read) transaction only when the cache
        cannot answer."""
        self.check_owned(table_id)
        cached = self.cache.get(table_id)
        if cached is not None and cached.version >= self.changes.version(table_id):
            return cached
        with session_scope() as session:
            return self.load_state(session, table_id, for_reading=True)

    def events_after(
        self,
        session_scope: Callable[[], AbstractContextManager[Session]],
        table_id: str,
        after_sequence: int,
        limit: int,
        *,
        at_least_up_to: int = 0,
    ) -> list[envelope_pb2.Envelope]:
        """Committed events after `after_sequence`, from memory when it holds all of them up to
        the latest published version (or `at_least_up_to`, e.g. a state the caller already read,
        which the cache may know before its events are published)."""
        self.check_owned(table_id)
        up_to = max(self.changes.version(table_id), at_least_up_to)
        recent = self.recent.after(table_id, after_sequence, up_to, limit)
        if recent is not None:
            return recent
        with session_scope() as session:
            return self.store.load(session, table_id, after_sequence, limit=limit)

    def load_state(self, session: Session, table_id: str, *, for_reading: bool = False) -> TableState:
        """The table's current state; NotFoundError for a table that was never opened.

        `for_reading` (views, authorization): a cached state as new as everything this process has
        committed is returned without asking the database. One engine instance owns a table
        (table engines shard by table id, ARCHITECTURE.md), so nothing newer can exist; a writer
        always reads the database, inside its own transaction.
        """
        self.check_owned(table_id)
        cached = self.cache.get(table_id)
        if for_reading and cached is not None and cached.version >= self.changes.version(table_id):
            return cached
        after = cached.version if cached is not None else 0
        envelopes = self.store.load(session, table_id, after)
        if cached is None and not envelopes:
            raise NotFoundError(f"no table {table_id!r}")
        state = fold((codec.event_of(envelope) for envelope in envelopes), cached)
        assert state.version == after + len(envelopes), (state.version, after, len(envelopes))
        if envelopes:
            with self._deadlines_lock:
                # Read from committed events, so a true prefix of the stream; but not a game in
                # progress of a table forgotten since its end (a read that began before the end).
                if state.is_over:
                    self._ended.setdefault(table_id, self.monotonic())
                if state.is_over or table_id not in self._forgotten:
                    self.cache.put(state)
        return state

    def open_from_assignment(
        self,
        session: Session,
        assigned: match_events_pb2.TableAssigned,
        causation_id: str,
        match_partition: int | None = None,
    ) -> list[envelope_pb2.Envelope]:
        """Open the table matchmaking formed; a table already open is left alone (redelivery).
        `match_partition`: the partition the assignment was read from (its owner, `ownership`).

        Four statements (SQLite): the fence with the check that the stream is new, the outbox and
        event inserts, the status row with its partition; an error leaves the transaction for the
        caller to roll back (the table-openings consumer does). The events are decided before the
        check: a redelivery costs one decision, a first delivery no query of its own."""
        seats = [seat.player_id for seat in sorted(assigned.seats, key=lambda seat: seat.seat)]
        events = open_table(
            assigned.table_id,
            assigned.room_id,
            codec.room_rules_of(assigned.room.rules),
            seats,
            assigned.seed,
        )
        envelopes, state = self.prepared(None, events, causation_id=causation_id)
        try:
            self._append_fenced(session, [(assigned.table_id, 0, envelopes)])
        except WrongExpectedVersionError:
            return []  # raised before anything was written: the transaction is still clean
        row = self._status_row(session, None, state, datetime_of(envelopes[-1].occurred_at))
        if match_partition is not None:
            row["match_partition"] = match_partition
        upsert_rows(session, table_status, [row], key=("table_id",))
        return envelopes

    def act(
        self,
        session_scope: Callable[[], AbstractContextManager[Session]],
        table_id: str,
        command_for_seat: Callable[[TableState], TableCommand],
        answer_of: Callable[[TableState, list[envelope_pb2.Envelope]], bytes] | None = None,
        idempotency: tuple[str, str, str] | None = None,
    ) -> tuple[TableState, list[envelope_pb2.Envelope], bytes]:
        """Decide `command_for_seat(state)` on the current state and append its events.

        With `idempotency` = (player id, key, request digest), the first answer of that key is stored
        in the same transaction as the events, and a retry returns it without deciding again (a
        retry with another request is FAILED_PRECONDITION, `mahjong_platform.idempotency`). Each attempt
        runs in its own transaction; a version conflict (another writer appended first) retries
        on the fresh state read from the store, at most DECIDE_ATTEMPTS_MAX times.
        """
        for attempt in range(DECIDE_ATTEMPTS_MAX):
            try:
                with session_scope() as session:
                    if idempotency is not None:
                        earlier = first_answer(session, table_id, *idempotency)
                        if earlier is not None:
                            return self.load_state(session, table_id), [], earlier
                    # First attempt: the cached state when it is as new as this process's commits
                    # (the append's expected-version check still catches any other writer); a
                    # retry reads the store.
                    state = self.load_state(session, table_id, for_reading=attempt == 0)
                    events, state_after = execute(state, command_for_seat(state))
                    envelopes, new_state, deadline = self._append(
                        session, state, events, causation_id="", state_after=state_after
                    )
                    assert new_state is not None
                    answer = answer_of(new_state, envelopes) if answer_of is not None else b""
                    if idempotency is not None:
                        remember_answer(session, table_id, *idempotency, answer)
                self.published(new_state, envelopes, deadline)
                return new_state, envelopes, answer
            except WrongExpectedVersionError:
                continue
        raise ConflictError(f"table {table_id} is busy: too many concurrent commands, retry")

    def _append(
        self,
        session: Session,
        state: TableState | None,
        events: Sequence[TableEvent],
        causation_id: str,
        state_after: TableState | None = None,
    ) -> tuple[list[envelope_pb2.Envelope], TableState | None, datetime.datetime | None]:
        """Append `events` after `state` (None: a new table) with the outbox and the status row;
        the envelopes (sequences set), the state after them and its deadline (`state_after`: as
        in `prepared`)."""
        if not events:
            return [], state, None
        envelopes, new_state = self.prepared(
            state, events, causation_id=causation_id, state_after=state_after
        )
        deadline = self.write_appended(session, state, envelopes, new_state)
        return envelopes, new_state, deadline

    def prepared(
        self,
        state: TableState | None,
        events: Sequence[TableEvent],
        causation_id: str = "",
        state_after: TableState | None = None,
    ) -> tuple[list[envelope_pb2.Envelope], TableState]:
        """The envelopes of `events` decided on `state` (None: a new table), numbered after it,
        and the state after them (`state_after` when the caller has it from `execute`, which
        folded the events as it decided them; else folded here); nothing is written."""
        table_id = state.table_id if state is not None else _table_id_of(events)
        version = state.version if state is not None else 0
        envelopes = new_envelopes(
            [codec.to_message(event) for event in events],
            clock=self.clock,
            stream_id=table_id,
            first_sequence=version + 1,
            causation_id=causation_id,
            correlation_id=table_id,
        )
        new_state = state_after if state_after is not None else fold(events, state) if events else state
        assert new_state is not None
        assert new_state.version == version + len(envelopes), (new_state.version, version, len(envelopes))
        return envelopes, new_state

    def write_appended(
        self,
        session: Session,
        base: TableState | None,
        envelopes: Sequence[envelope_pb2.Envelope],
        new_state: TableState,
    ) -> datetime.datetime | None:
        """Append `envelopes` (from `prepared`, possibly of several commands) after `base`, the
        version they were decided on (`WrongExpectedVersionError` when the stream moved), with
        their outbox rows and the status row of `new_state`; its deadline."""
        version = base.version if base is not None else 0
        if self.fence is not None:
            self.fence(session, (new_state.table_id,))
        last_sequence = self.store.append(session, new_state.table_id, version, envelopes)
        assert new_state.version == last_sequence, (new_state.version, last_sequence)
        row = self._status_row(session, base, new_state, datetime_of(envelopes[-1].occurred_at))
        upsert_rows(session, table_status, [row], key=("table_id",))
        return typing.cast(datetime.datetime | None, row["deadline_at"])

    def write_batch(
        self,
        session: Session,
        appends: Sequence[tuple[TableState, Sequence[envelope_pb2.Envelope], TableState]],
        *,
        checked: Collection[tuple[str, int]] = frozenset(),
    ) -> list[datetime.datetime | None]:
        """`write_appended` for several tables at once (group commit): (the state the envelopes
        were decided on, the envelopes, the state after them) each, a table at most once. One
        version query and one insert for all the events (`EventStore.append_batch`: a table that
        moved raises `WrongExpectedVersionError`), one status upsert. Without a savepoint: after
        any error the caller rolls the whole transaction back (the group commit does). On SQLite
        the fence is checked in the statement that checks the versions (`fence_condition`), and
        nothing is asked when every (table id, version) appended from is in `checked`
        (`first_answers_checked` asked it in this transaction)."""
        self._append_fenced(
            session, [(base.table_id, base.version, envelopes) for base, envelopes, _new in appends], checked
        )
        rows = [
            self._status_row(session, base, new, datetime_of(envelopes[-1].occurred_at))
            for base, envelopes, new in appends
        ]
        upsert_rows(session, table_status, rows, key=("table_id",))
        return [typing.cast(datetime.datetime | None, row["deadline_at"]) for row in rows]

    def first_answers_checked(
        self, session: Session, keys: Sequence[AnswerKey], bases: Sequence[TableState]
    ) -> tuple[dict[AnswerKey, StoredAnswer], frozenset[tuple[str, int]]]:
        """`first_answers` of `keys` and, on SQLite, in the same statement what `write_batch` would
        ask before it appends: every table of `bases` at that version in the store and, with an
        ownership fence, still this replica's. The group commit asks it first in its transaction
        (whose BEGIN IMMEDIATE holds the write lock: nothing changes before its commit), and
        `write_batch` then asks nothing more: one statement a batch instead of two, with no row
        when all is well (each statement and each row is a GIL release and re-acquire in the
        driver). Returns the answers and the (table id, version) pairs checked (none on PostgreSQL
        or without a check that covers the fence: `write_batch` asks as before); a table not at its
        version raises `WrongExpectedVersionError`, one that moved `TableMovedError`."""
        size = padded_size(max(len(keys), len(bases), 1))
        if (
            not bases
            or size > COMMANDS_PER_ANSWER_QUERY_MAX
            or (self.fence is not None and self.fence_condition is None)
            or session.get_bind().dialect.name != "sqlite"
        ):
            return first_answers(session, keys), frozenset()
        table_ids = [base.table_id for base in bases]
        fence: SqlCondition = ("1", ())
        if self.fence_condition is not None:
            try:
                fence = self.fence_condition(table_ids)
            except TableMovedError:  # the append says so, or the command's own refusal
                return first_answers(session, keys), frozenset()
        differing, versions = versions_differing_sqlite(
            [(base.table_id, base.version) for base in bases], size
        )
        wanted = set(keys)
        answers = (
            tuple(value for key in padded_by_repeating(sorted(wanted), size) for value in key) if keys else ()
        )
        text = _checked_answers_text(size if keys else 0, differing, fence[0])
        found: dict[AnswerKey, StoredAnswer] = {}
        for row in sqlite_rows(session, text, answers + versions + tuple(fence[1])):
            if row[0] is None:  # the check's row: only when a table moved or is not at its version
                if not row[4]:
                    raise TableMovedError
                actual = self.store.stream_versions(session, table_ids)
                for base in bases:
                    if actual[base.table_id] != base.version:
                        raise WrongExpectedVersionError(base.table_id, base.version, actual[base.table_id])
                raise WrongExpectedVersionError(
                    bases[0].table_id, bases[0].version, actual[bases[0].table_id]
                )
            key = (row[0], row[1], row[2])
            if key in wanted:
                found[key] = (row[3], bytes(row[4]))
        return found, frozenset((base.table_id, base.version) for base in bases)

    def _append_fenced(
        self,
        session: Session,
        appends: Sequence[tuple[str, int, Sequence[envelope_pb2.Envelope]]],
        checked: Collection[tuple[str, int]] = frozenset(),
    ) -> None:
        """The fence, then `EventStore.append_batch` without a savepoint (the caller rolls back on
        any error); on SQLite the fence is asked in the statement that checks the versions, or
        not at all when `first_answers_checked` asked both for every append (`checked`)."""
        if checked and all((table_id, version) in checked for table_id, version, _envelopes in appends):
            self.store.append_batch(session, appends, savepoint=False, versions_checked=True)
            return
        table_ids = [table_id for table_id, _version, _envelopes in appends]
        fence_condition: SqlCondition | None = None
        if self.fence_condition is not None and session.get_bind().dialect.name == "sqlite":
            fence_condition = self.fence_condition(table_ids)
        elif self.fence is not None:
            self.fence(session, table_ids)
        try:
            self.store.append_batch(session, appends, savepoint=False, sqlite_condition=fence_condition)
        except ConditionUnmetError:
            raise TableMovedError from None

    def _status_row(
        self, session: Session, base: TableState | None, state: TableState, last_event_at: datetime.datetime
    ) -> dict[str, object]:
        deadline = self._deadline_after(session, base, state, last_event_at)
        return {
            "table_id": state.table_id,
            "room_id": state.room_id,
            "version": state.version,
            "phase": str(state.phase),
            "ended": state.is_over,
            "last_event_at": last_event_at,
            "deadline_at": deadline,
        }

    def _deadline_after(
        self,
        session: Session | None,
        base: TableState | None,
        state: TableState,
        last_event_at: datetime.datetime,
    ) -> datetime.datetime | None:
        """When the server acts for whoever `state` waits on (None: nobody): the turn timeout after
        the last event, except while a claim window stays open and nothing since `base` is visible
        to the seats it asks; then the window keeps the deadline it opened with, as a deadline
        moved by another asked seat's hidden pass would tell them of it (`unseen_by_the_asked`)."""
        if not waited_on(state) or state.is_over:
            return None
        if unseen_by_the_asked(base, state):
            assert base is not None
            known, deadline = self.known_deadline(base)
            if not known:  # not written by this process (a takeover): the stored one, in this transaction
                assert session is not None, "a base's deadline not known here is read in the transaction"
                deadline = session.execute(
                    sqlalchemy.select(table_status.c.deadline_at).where(
                        table_status.c.table_id == base.table_id
                    )
                ).scalar_one_or_none()
            if deadline is not None:  # SQLite gives back a naive UTC time
                return as_utc(deadline)
        return last_event_at + datetime.timedelta(milliseconds=state.rules.turn_timeout_ms)

    def published(
        self,
        state: TableState,
        envelopes: Sequence[envelope_pb2.Envelope],
        deadline: datetime.datetime | None,
    ) -> None:
        """After the commit: the cache, the deadline, the event tail, then the watchers."""
        self.published_many([(state, envelopes, deadline)])

    def published_many(
        self,
        tables: Sequence[tuple[TableState, Sequence[envelope_pb2.Envelope], datetime.datetime | None]],
        before_wakeups: Callable[[], None] | None = None,
    ) -> None:
        """`published` for the tables of one commit (state, envelopes, deadline each, a table at
        most once): their watchers are told together (`TableChanges.notify_many`), after
        `before_wakeups()`, which sees every table published (the group commit answers its
        callers there, so an answer is not queued behind the views its commit wakes)."""
        with self._deadlines_lock:
            if self._forgotten and any(state.table_id in self._forgotten for state, _, _ in tables):
                tables = [table for table in tables if table[0].table_id not in self._forgotten]
            for state, _envelopes, deadline in tables:
                table_id = state.table_id
                if state.is_over:  # no deadline (`known_deadline`); forgotten a while later
                    self._deadlines.pop(table_id, None)
                    self._ended.setdefault(table_id, self.monotonic())
                    continue
                known = self._deadlines.get(table_id)
                if (known is None or known[0] <= state.version) and table_id not in self._ended:
                    self._deadlines[table_id] = (state.version, deadline)
                    alarm_before = self._alarm_before
                    if deadline is not None and alarm_before is not None and as_utc(deadline) < alarm_before:
                        self._deadline_alarm.set()
            # Under the lock `forget_ended` decides under: a table it forgets is not put back.
            for state, envelopes, _deadline in tables:
                # The tail before the state: a watcher that sees the new state finds its events in memory.
                self.recent.add(state.table_id, envelopes)
                self.cache.put(state)
        self.changes.notify_many(
            [(state.table_id, state.version, state.is_over) for state, _, _ in tables], before_wakeups
        )
        self.forget_ended()

    def next_deadline(self, after: datetime.datetime | None = None) -> datetime.datetime | None:
        """The earliest deadline after `after` of the tables whose latest version this process
        wrote (None: none): the deadline worker looks at the store then (`deadlines`), not ten
        times a second. `after`: the worker's last look, so a deadline that look found nothing to
        do for (its table moved on, or away) is not asked about again at every poll."""
        bound = None if after is None else as_utc(after)
        with self._deadlines_lock:
            known = [
                as_utc(deadline) for _version, deadline in self._deadlines.values() if deadline is not None
            ]
        pending = known if bound is None else [deadline for deadline in known if deadline > bound]
        return min(pending) if pending else None

    def deadline_alarm(self, before: datetime.datetime | None) -> threading.Event:
        """The event a commit sets when it writes a deadline earlier than `before` (the moment the
        deadline worker looks at the store next anyway), cleared now; None: no alarm."""
        with self._deadlines_lock:
            self._deadline_alarm.clear()
            self._alarm_before = None if before is None else as_utc(before)
        return self._deadline_alarm

    def forget_ended(self) -> list[str]:
        """Forget the tables whose game ended `ended_tables_kept_seconds` ago or more: their
        states, event tails, versions and deadlines (`ENDED_TABLES_KEPT_SECONDS`); the ids
        forgotten. Every commit asks (one look at the oldest ended table when none is due)."""
        with self._deadlines_lock:
            if not self._ended:
                return []
            due_before = self.monotonic() - self.ended_tables_kept_seconds
            table_ids = []
            for table_id, ended_at in self._ended.items():
                if ended_at > due_before:
                    break
                table_ids.append(table_id)
            if not table_ids:
                return []
            for table_id in table_ids:
                self._forgotten[table_id] = None
            while len(self._forgotten) > FORGOTTEN_TABLES_KEPT:
                self._forgotten.popitem(last=False)
        self._forget(table_ids)
        return table_ids

    def in_memory(self, table_id: str) -> bool:
        """Whether this process keeps anything of the table in memory (its state, event tail,
        version, deadline or end): tests and debugging."""
        with self._deadlines_lock:
            remembered = table_id in self._deadlines or table_id in self._ended
        return (
            remembered
            or self.cache.get(table_id) is not None
            or self.changes.version(table_id) != 0
            or self.recent.holds(table_id)
        )

    def committed(self, envelopes: Sequence[envelope_pb2.Envelope]) -> None:
        """Tell Watch streams about events committed outside `act` (opening, consumers). A table's
        opening (its stream from sequence 1, `open_from_assignment`) is published as a command's
        events are: its state, deadline and event tail into memory first, so the streams that
        waited for the table read none of them from the store."""
        if not envelopes:
            return
        if envelopes[0].sequence == 1 and self.cache.get(envelopes[0].stream_id) is None:
            state = fold((codec.event_of(envelope) for envelope in envelopes), None)
            assert state.version == len(envelopes), (state.version, len(envelopes))
            # A new table has no claim window kept open from a base: the turn timeout after its
            # last event, as `_status_row` wrote it.
            deadline = self._deadline_after(None, None, state, datetime_of(envelopes[-1].occurred_at))
            self.published(state, envelopes, deadline)
            return
        self.changes.notify(envelopes[-1].stream_id, envelopes[-1].sequence)

    def expired_tables(self, session: Session, now: datetime.datetime, limit: int = 100) -> list[str]:
        """Live tables whose deadline has passed, oldest deadline first."""
        return list(
            session.execute(
                sqlalchemy.select(table_status.c.table_id)
                .where(table_status.c.ended.is_(False), table_status.c.deadline_at <= now)
                .order_by(table_status.c.deadline_at)
                .limit(limit)
            ).scalars()
        )

    def live_tables(self, session: Session, limit: int = 10_000) -> list[str]:
        return list(
            session.execute(
                sqlalchemy.select(table_status.c.table_id).where(table_status.c.ended.is_(False)).limit(limit)
            ).scalars()
        )


def _table_id_of(events: Sequence[TableEvent]) -> str:
    table_id = getattr(events[0], "table_id", "")
    assert table_id, "the first event of a new table must be TableOpened"
    return str(table_id)


# Statements built once (building one costs more than running it on SQLite).
_FIRST_ANSWER = sqlalchemy.select(table_answers.c.answer, table_answers.c.request_digest).where(
    table_answers.c.table_id == sqlalchemy.bindparam("table_id"),
    table_answers.c.player_id == sqlalchemy.bindparam("player_id"),
    table_answers.c.idempotency_key == sqlalchemy.bindparam("idempotency_key"),
)
_FIRST_ANSWERS = sqlalchemy.select(
    table_answers.c.table_id,
    table_answers.c.player_id,
    table_answers.c.idempotency_key,
    table_answers.c.request_digest,
    table_answers.c.answer,
).where(
    table_answers.c.table_id.in_(sqlalchemy.bindparam("table_ids", expanding=True)),
    table_answers.c.idempotency_key.in_(sqlalchemy.bindparam("idempotency_keys", expanding=True)),
)
_REMEMBER_ANSWER = table_answers.insert()


def first_answer(session: Session, table_id: str, player_id: str, key: str, digest: str) -> bytes | None:
    """The first answer of this key, or None; FAILED_PRECONDITION when it answered another request."""
    row = session.execute(
        _FIRST_ANSWER, {"table_id": table_id, "player_id": player_id, "idempotency_key": key}
    ).first()
    if row is None:
        return None
    return replay_answer("Act", row.request_digest, digest, bytes(row.answer))


AnswerKey = tuple[str, str, str]
"""(table id, player id, idempotency key)."""
StoredAnswer = tuple[str | None, bytes]
"""(request digest, first answer) of a key."""


def first_answers(session: Session, keys: Sequence[AnswerKey]) -> dict[AnswerKey, StoredAnswer]:
    """The stored request digests and first answers of several keys, in one query."""
    if not keys:
        return {}
    wanted = set(keys)
    rows: Sequence[Sequence[typing.Any]]
    if session.get_bind().dialect.name == "sqlite":
        rows = _first_answers_sqlite(session, sorted(wanted))
    else:
        rows = session.execute(
            _FIRST_ANSWERS,
            {
                "table_ids": sorted({key[0] for key in wanted}),
                "idempotency_keys": sorted({key[2] for key in wanted}),
            },
        ).all()
    # (table id, player id, key, request digest, answer) each: the column order of both queries.
    found = {(row[0], row[1], row[2]): (row[3], bytes(row[4])) for row in rows}
    return {key: answer for key, answer in found.items() if key in wanted}


def _first_answers_sqlite(session: Session, keys: Sequence[AnswerKey]) -> list[Sequence[typing.Any]]:
    """SQLite: the stored answers of exactly these keys, by primary key, in one statement per
    COMMANDS_PER_ANSWER_QUERY_MAX keys, padded to a power of two by repeating a key (a few
    statement texts, cached by the driver; SQLAlchemy's expanding IN renders a new one for every
    batch size)."""
    rows: list[Sequence[typing.Any]] = []
    for chunk, size in padded_chunks(keys, COMMANDS_PER_ANSWER_QUERY_MAX):
        values = tuple(value for key in padded_by_repeating(chunk, size) for value in key)
        rows += sqlite_rows(session, _first_answers_text(size), values)
    return rows


COMMANDS_PER_ANSWER_QUERY_MAX = 256


@functools.cache
def _first_answers_text(count: int) -> str:
    """One equality test of the whole primary key per key, joined by OR: SQLite answers it with one
    index search per key ("MULTI-INDEX OR"). A row-value `IN (VALUES ...)` reads the same but
    scans the whole table, so each batch cost grew with every answer ever stored."""
    keys = " OR ".join(["(table_id = ? AND player_id = ? AND idempotency_key = ?)"] * count)
    return (
        f"SELECT table_id, player_id, idempotency_key, request_digest, answer FROM table_answers WHERE {keys}"
    )


@functools.cache
def _checked_answers_text(keys: int, differing: str, fence: str) -> str:
    """`_first_answers_text(keys)` (none when 0) and, in a row of its own with a NULL table id only
    when it fails, the check of `first_answers_checked`: the versions differing, the fence met."""
    check = f"SELECT NULL, NULL, NULL, differing, met FROM (SELECT {differing} AS differing, {fence} AS met)"
    check += " WHERE differing OR NOT met"
    return f"{_first_answers_text(keys)} UNION ALL {check}" if keys else check


def remember_answers(session: Session, answers: dict[AnswerKey, tuple[str, bytes]]) -> None:
    """Store first answers, key -> (request digest, answer), in one statement."""
    insert_rows(
        session,
        table_answers,
        [
            {
                "table_id": table_id,
                "player_id": player_id,
                "idempotency_key": key,
                "request_digest": digest,
                "answer": answer,
            }
            for (table_id, player_id, key), (digest, answer) in answers.items()
        ],
    )


def remember_answer(
    session: Session, table_id: str, player_id: str, key: str, digest: str, answer: bytes
) -> None:
    session.execute(
        _REMEMBER_ANSWER,
        {
            "table_id": table_id,
            "player_id": player_id,
            "idempotency_key": key,
            "request_digest": digest,
            "answer": answer,
        },
    )


def ended(events: Sequence[TableEvent]) -> bool:
    return any(isinstance(event, GameEnded) for event in events)
