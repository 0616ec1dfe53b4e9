"""Group commit: the commands that arrive together are decided in memory and written in one
transaction, each answer released only after that commit.

One writer thread takes every command queued since its last commit (at most COMMANDS_PER_BATCH)
and, inside one transaction:

1. reads the stored first answers of the batch's idempotency keys in one query (a retried key is
   answered from there, or from an earlier command of the same batch, and decides nothing); on
   SQLite the same query checks what the append would check first: each table of the batch at
   the version it is decided on, and the ownership fence (`TableEngine.first_answers_checked`);
2. decides each command in arrival order on its table's state: the cached state (authoritative
   for the tables this process owns) or, for a later command of the same table in the batch, the
   state after the earlier one; a refused command is answered with its rejection and writes
   nothing;
3. appends each table's new events with the version its first command of the batch decided on
   (the store refuses the append if anyone else wrote in between: `WrongExpectedVersionError`),
   with the outbox rows, the status row and every first answer, then commits.

Then it publishes the new states (cache, event tail, watchers) and answers the waiting callers.

On SQLite (unless `MAHJONG_TABLE_WRITES_ON_LOOP=0`, see `WRITES_ON_LOOP`) the batches of
`submit_async` (the Play streams' commands) run on the event loop itself instead: the commands
submitted within `LOOP_BATCH_TURNS` turns of the loop from the first are one batch, decided,
written and committed by a callback of the loop, and answered by the loop's next turn. The writer
thread shares the GIL with the loop, and each statement of its batch gives the GIL up and waits
to get it back from the busy loop (up to the interpreter's switch interval, 5 ms, every time); on
the loop the batch runs through without a hand-off, and the loop waits for the COMMIT's sync with
the GIL released. `submit` (other threads' commands) and PostgreSQL keep the writer thread.

If the batch's transaction fails (a version conflict with another writer, a database error),
nothing of it was written or published: each command of the batch is then run on its own through
`TableEngine.act`, which re-reads the table from the store and retries a conflict, exactly as
before group commit. So the guarantees are those of `act`: expected-version appends, the outbox
in the same transaction, one answer per idempotency key.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import datetime
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager

import grpc
from mahjong.v1 import envelope_pb2
from mahjong_platform.config import ConfigurationError, integer_setting
from mahjong_platform.errors import ErrorMapping, ServiceError, status_code_for
from mahjong_platform.idempotency import replay_answer
from sqlalchemy.orm import Session

from mahjong_table import stages
from mahjong_table.core.commands import TableCommand
from mahjong_table.tables import AnswerKey, StoredAnswer, TableEngine, remember_answers
from mahjong_table.variants import AnyTableState as TableState
from mahjong_table.variants import execute

logger = logging.getLogger(__name__)

COMMANDS_PER_BATCH = 256
SUMMARY_SECONDS = 60.0
LOOP_BATCH_TURNS_MAX = 8


def writes_on_loop_setting(environ: Mapping[str, str] = os.environ) -> bool:
    """MAHJONG_TABLE_WRITES_ON_LOOP: `1` (the default) or `0`; anything else stops the process at
    start naming the variable, as `mahjong_platform.config` does for the others."""
    text = environ.get("MAHJONG_TABLE_WRITES_ON_LOOP", "1")
    if text not in ("0", "1"):
        raise ConfigurationError(f"MAHJONG_TABLE_WRITES_ON_LOOP must be 0 or 1, got {text!r}")
    return text == "1"


def loop_batch_turns_setting(environ: Mapping[str, str] = os.environ) -> int:
    """MAHJONG_TABLE_LOOP_BATCH_TURNS: an integer from 1 to `LOOP_BATCH_TURNS_MAX` (2 by default);
    anything else stops the process at start naming the variable."""
    return integer_setting(
        environ, "MAHJONG_TABLE_LOOP_BATCH_TURNS", default=2, minimum=1, maximum=LOOP_BATCH_TURNS_MAX
    )


WRITES_ON_LOOP = writes_on_loop_setting()
"""Whether `submit_async`'s batches run on the caller's event loop when the database is SQLite (its
statements are calls into the embedded library, not round trips to a server that would hold up
the loop) instead of on the writer thread; MAHJONG_TABLE_WRITES_ON_LOOP=0 turns it off. On this
2-core box, alternated with the writer thread (32 tables, 128 games), the table's CPU per game
was within the runs' noise either way (saturation 0.165 / 0.165, 0.148 / 0.125, 0.139 and 0.124
/ 0.122; 100 ms think time 0.199 and 0.194 / 0.203 and 0.184), and the answers came sooner
(saturation Act p50/p99 85/268 -> 67/167 ms, 63/210 -> 44/124; think time 18.8/172 and 11.7/134
-> 11.0/97 and 8.0/67 ms): no hand-off to a writer thread and back, whose every statement waited
for the GIL behind the busy loop."""
LOOP_BATCH_TURNS = loop_batch_turns_setting()
"""A loop batch runs this many turns of the loop after its first command was submitted
(MAHJONG_TABLE_LOOP_BATCH_TURNS, 2): with one, the commands submitted in the same turn as the first
(the Play streams' reads that completed together) are one batch, run by the next turn; with two,
those of the next turn join it (11.6 commands a batch at saturation against 6.4), each command
waiting a turn of the loop more. One turn won a first pair with 100 ms think time (Act p50/p99
20.2/141 and 20.2/147 ms against 25.3/168 and 43.3/251), but not the next ones: 2026-12-07
10:35-10:48 UTC, alternated on this 2-core box (32 tables, 128 games), one turn against two at
saturation cost the table 0.157 / 0.158 against 0.143 / 0.139 CPU s a game (4.79 / 4.73 against
5.22 / 5.35 games/s), and with think time gave Act p50/p99 19.1/138 and 19.2/121 against 11.9/117
and 23.1/157 ms: two turns stay the default."""

SessionScope = Callable[[], AbstractContextManager[Session]]
AnswerOf = Callable[[TableState, list[envelope_pb2.Envelope]], bytes]
IdempotencyKey = tuple[str, str, str]
"""(player id, idempotency key, request digest)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Rejection:
    """A command the rules or the request refused: its status and message (nothing written)."""

    status_code: grpc.StatusCode
    message: str


@dataclasses.dataclass(frozen=True, slots=True)
class Accepted:
    """A command's outcome after its commit: the table after it, its events, its answer."""

    state: TableState
    envelopes: list[envelope_pb2.Envelope]
    answer: bytes


class Deferred(Exception):
    """Raised by a command's `command_for` when it cannot be decided now (say a claim window that
    does not ask its seat is open): nothing is written and the caller may submit it again later."""


@dataclasses.dataclass(frozen=True, slots=True)
class Deferral:
    """The outcome of a command that raised `Deferred`."""


Outcome = Accepted | Rejection | Deferral


@dataclasses.dataclass(slots=True)
class _Command:
    table_id: str
    command_for: Callable[[TableState], TableCommand]
    answer_of: AnswerOf | None
    idempotency: IdempotencyKey | None
    future: concurrent.futures.Future[Outcome]
    # `submit_async`: the caller's event loop and the future it awaits there.
    waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[Outcome]] | None = None
    stamps: stages.Timeline | None = None  # `stages` (bench and debugging only)
    handed: bool = False  # its outcome was handed to its event loop (`_hand_to_loops`)


@dataclasses.dataclass(slots=True)
class _TableBatch:
    """One table's part of a batch: the version it started at and what its commands added."""

    base: TableState
    state: TableState
    envelopes: list[envelope_pb2.Envelope] = dataclasses.field(default_factory=list)
    deadline: datetime.datetime | None = None


class GroupCommitter:
    """Queues commands for one writer thread (see the module docstring). `submit` from any thread
    or event loop; the future resolves after the commit (or with the command's rejection)."""

    def __init__(
        self,
        engine: TableEngine,
        session_scope: SessionScope,
        error_mapping: ErrorMapping | None = None,
        commands_per_batch: int = COMMANDS_PER_BATCH,
        *,
        autostart: bool = True,
        on_loop: bool | None = None,
    ) -> None:
        """`autostart=False`: the writer thread starts at `start()`, not at the first `submit`
        (tests queue several commands first, to see them committed as one batch). `on_loop`:
        whether `submit_async` commits on the caller's event loop (None: `WRITES_ON_LOOP`, on
        SQLite only)."""
        self._engine = engine
        self._session_scope = session_scope
        self._error_mapping = dict(error_mapping or {})
        self._commands_per_batch = commands_per_batch
        self._queue: collections.deque[_Command] = collections.deque()
        self._wake = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._autostart = autostart
        self.batches = 0
        self.commands = 0
        self._last_summary = time.monotonic()
        # `submit_async` on the caller's event loop (None: `WRITES_ON_LOOP` and SQLite, decided at
        # its first call): each loop's commands queued within `LOOP_BATCH_TURNS` turns of the
        # loop, committed by a callback of the loop (touched only on that loop's thread).
        self._on_loop = on_loop if on_loop is not None else (None if WRITES_ON_LOOP else False)
        self._loop_batches: dict[asyncio.AbstractEventLoop, list[_Command]] = {}

    def start(self) -> None:
        with self._wake:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="table-group-commit", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        """Finish what is queued, then stop the writer thread."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join()

    def submit(
        self,
        table_id: str,
        command_for: Callable[[TableState], TableCommand],
        answer_of: AnswerOf | None = None,
        idempotency: IdempotencyKey | None = None,
    ) -> concurrent.futures.Future[Outcome]:
        """Queue a command of `table_id`: `command_for(state)` is decided on the state current when
        its turn comes (it may raise a `ServiceError` to refuse, e.g. a stale expected sequence)."""
        return self._submit(table_id, command_for, answer_of, idempotency, None)

    async def submit_async(
        self,
        table_id: str,
        command_for: Callable[[TableState], TableCommand],
        answer_of: AnswerOf | None = None,
        idempotency: IdempotencyKey | None = None,
        stamps: stages.Timeline | None = None,
    ) -> Outcome:
        """`submit` for a caller on an event loop, awaiting the outcome. On the loop (`on_loop`,
        or `WRITES_ON_LOOP` on SQLite): the commands submitted within `LOOP_BATCH_TURNS` turns of the
        loop are one batch, run by a callback of the loop on its own thread (`_submit_on_loop`),
        answered in the loop's next turn. On the writer thread: it
        hands the outcomes of a batch to each loop at once, one wake-up of the loop per batch
        (awaiting `asyncio.wrap_future(submit(...))` costs one per command, each a write to the
        loop's self-pipe by the writer thread). Cancelled before its batch runs: skipped, as with
        `submit`."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Outcome] = loop.create_future()
        stages.stamp(stamps, stages.QUEUED)
        if self._on_loop is None:
            with self._session_scope() as session:  # no statement: the session connects lazily
                self._on_loop = session.get_bind().dialect.name == "sqlite"
        if self._on_loop:
            future = self._submit_on_loop(
                loop,
                _Command(
                    table_id,
                    command_for,
                    answer_of,
                    idempotency,
                    concurrent.futures.Future(),
                    (loop, waiter),
                    stamps,
                ),
            )
        else:
            future = self._submit(table_id, command_for, answer_of, idempotency, (loop, waiter), stamps)
        try:
            return await waiter
        except asyncio.CancelledError:
            future.cancel()  # fails once the writer took it: that command commits and is answered
            raise

    def _submit(
        self,
        table_id: str,
        command_for: Callable[[TableState], TableCommand],
        answer_of: AnswerOf | None,
        idempotency: IdempotencyKey | None,
        waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[Outcome]] | None,
        stamps: stages.Timeline | None = None,
    ) -> concurrent.futures.Future[Outcome]:
        future: concurrent.futures.Future[Outcome] = concurrent.futures.Future()
        command = _Command(table_id, command_for, answer_of, idempotency, future, waiter, stamps)
        with self._wake:
            if self._stopping:
                raise RuntimeError("the table engine is stopping")
            self._queue.append(command)
            self._wake.notify()
        if self._autostart:
            self.start()
        return future

    def _submit_on_loop(
        self, loop: asyncio.AbstractEventLoop, command: _Command
    ) -> concurrent.futures.Future[Outcome]:
        """Queue `command` for the batch the loop runs `LOOP_BATCH_TURNS` turns after the first
        command of the batch (which schedules it): the commands that arrive meanwhile go
        together, and the batch is decided, written and committed on the loop's own thread, with
        no hand-off to a writer thread and back (each a wait for the GIL behind the loop)."""
        if self._stopping:
            raise RuntimeError("the table engine is stopping")
        batch = self._loop_batches.get(loop)
        if batch is None:
            batch = self._loop_batches[loop] = []
            loop.call_soon(self._run_loop_batch, loop, LOOP_BATCH_TURNS - 1)
        batch.append(command)
        return command.future

    def _run_loop_batch(self, loop: asyncio.AbstractEventLoop, turns_left: int = 0) -> None:
        if turns_left > 0:  # one more turn of the loop: the commands its callbacks submit join
            loop.call_soon(self._run_loop_batch, loop, turns_left - 1)
            return
        commands = self._loop_batches.pop(loop, [])
        for command in commands:
            assert command.waiter is not None
            if command.waiter[1].cancelled():  # its task was cancelled: skipped, as in `_run_batch`
                command.future.cancel()
        for start in range(0, len(commands), self._commands_per_batch):
            self._run_batch(commands[start : start + self._commands_per_batch], loop)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._queue and not self._stopping:
                    self._wake.wait()
                if not self._queue:
                    return
                batch = [
                    self._queue.popleft() for _ in range(min(len(self._queue), self._commands_per_batch))
                ]
            self._run_batch(batch)

    def _run_batch(self, batch: list[_Command], running: asyncio.AbstractEventLoop | None = None) -> None:
        """`running`: the event loop whose own thread runs the batch (None: the writer thread)."""
        # A caller that gave up (its Act cancelled) is skipped before anything is decided; the
        # others' futures are running from now on, so no cancel can stop their answers.
        batch = [command for command in batch if command.future.set_running_or_notify_cancel()]
        if not batch:
            return
        stages.stamp_all([command.stamps for command in batch], stages.TAKEN)
        try:
            self.commit(batch, running)
        except BaseException as error:  # never leave a caller waiting
            logger.exception("group commit failed unexpectedly")
            for command in batch:
                if not command.future.done():
                    command.future.set_exception(error)
        finally:
            _hand_to_loops(batch, running)

    def commit(self, batch: Sequence[_Command], running: asyncio.AbstractEventLoop | None = None) -> None:
        """Decide and write `batch` in one transaction, publish, answer (see the module docstring);
        `running` as in `_run_batch`."""
        self.batches += 1
        self.commands += len(batch)
        now = time.monotonic()
        if now - self._last_summary >= SUMMARY_SECONDS:
            logger.info(
                "group commit: %d commands in %d batches (%.1f per batch) since the start",
                self.commands,
                self.batches,
                self.commands / self.batches,
            )
            self._last_summary = now
        try:
            outcomes, tables = self._decide_and_write(batch)
        except Exception:
            logger.debug("group commit of %d commands fell back to one transaction each", len(batch))
            for command in batch:
                self._commit_alone(command)
            return

        def answer() -> None:
            for command, outcome in zip(batch, outcomes, strict=True):
                command.future.set_result(outcome)
            stages.stamp_all([command.stamps for command in batch], stages.PUBLISHED)
            _hand_to_loops(batch, running)

        # The states first (a caller reads its own write), then the answers, then the watchers:
        # the event loop runs the answers before the view updates their commit wakes.
        self._engine.published_many(
            [(table.state, table.envelopes, table.deadline) for table in tables.values() if table.envelopes],
            before_wakeups=answer,
        )

    def _decide_and_write(self, batch: Sequence[_Command]) -> tuple[list[Outcome], dict[str, _TableBatch]]:
        outcomes: list[Outcome] = []
        tables: dict[str, _TableBatch] = {}
        new_answers: dict[AnswerKey, tuple[str, bytes]] = {}
        timelines = [command.stamps for command in batch] if stages.ENABLED else []
        with self._session_scope() as session:
            stages.stamp_all(timelines, stages.BEGUN)
            for command in batch:  # the tables decided on, known before the first statement
                if command.table_id not in tables:
                    try:
                        state = self._engine.load_state(session, command.table_id, for_reading=True)
                    except Exception:
                        continue  # `_decide` loads it again and refuses the command
                    tables[command.table_id] = _TableBatch(base=state, state=state)
            keys = [(c.table_id, *c.idempotency[:2]) for c in batch if c.idempotency is not None]
            # The stored answers and, in the same statement, the versions and the fence the append
            # would check: each statement is a GIL release and re-acquire in the driver.
            stored_answers, checked = self._engine.first_answers_checked(
                session, keys, [table.base for table in tables.values()]
            )
            for command in batch:
                outcome = self._decide(session, command, tables, stored_answers, new_answers)
                outcomes.append(outcome)
            stages.stamp_all(timelines, stages.DECIDED)
            written = [table for table in tables.values() if table.envelopes]
            if written:
                deadlines = self._engine.write_batch(
                    session,
                    [(table.base, table.envelopes, table.state) for table in written],
                    checked=checked,
                )
                for table, deadline in zip(written, deadlines, strict=True):
                    table.deadline = deadline
            remember_answers(session, new_answers)
            stages.stamp_all(timelines, stages.WRITTEN)
        stages.stamp_all(timelines, stages.COMMITTED)
        return outcomes, tables

    def _decide(
        self,
        session: Session,
        command: _Command,
        tables: dict[str, _TableBatch],
        stored_answers: dict[AnswerKey, StoredAnswer],
        new_answers: dict[AnswerKey, tuple[str, bytes]],
    ) -> Outcome:
        key: AnswerKey | None = None
        digest = ""
        if command.idempotency is not None:
            player_id, idempotency_key, digest = command.idempotency
            key = (command.table_id, player_id, idempotency_key)
        table = tables.get(command.table_id)
        try:
            if table is None:
                state = self._engine.load_state(session, command.table_id, for_reading=True)
                table = tables[command.table_id] = _TableBatch(base=state, state=state)
            if key is not None:
                earlier = new_answers.get(key) or stored_answers.get(key)
                if earlier is not None:
                    # The first answer; FAILED_PRECONDITION when the key came with another request.
                    return Accepted(table.state, [], replay_answer("Act", earlier[0], digest, earlier[1]))
            events, state_after = execute(table.state, command.command_for(table.state))
        except Deferred:
            return Deferral()
        except Exception as error:
            return self._rejection_of(error)
        envelopes, new_state = self._engine.prepared(table.state, events, state_after=state_after)
        table.state = new_state
        table.envelopes.extend(envelopes)
        answer = command.answer_of(new_state, envelopes) if command.answer_of is not None else b""
        if key is not None:
            new_answers[key] = (digest, answer)
        return Accepted(new_state, envelopes, answer)

    def _rejection_of(self, error: Exception) -> Rejection:
        status_code = status_code_for(error, self._error_mapping)
        if status_code is None:
            raise error  # a bug, not a refusal: the batch falls back and the caller sees INTERNAL
        message = error.message if isinstance(error, ServiceError) else str(error)
        return Rejection(status_code, message)

    def _commit_alone(self, command: _Command) -> None:
        """`TableEngine.act` for one command: its own transaction, conflicts retried."""
        try:
            state, envelopes, answer = self._engine.act(
                self._session_scope,
                command.table_id,
                command.command_for,
                command.answer_of,
                command.idempotency,
            )
        except Deferred:
            command.future.set_result(Deferral())
            return
        except Exception as error:
            try:
                command.future.set_result(self._rejection_of(error))
            except Exception as unexpected:
                command.future.set_exception(unexpected)
            return
        command.future.set_result(Accepted(state, envelopes, answer))


def _hand_to_loops(batch: Sequence[_Command], running: asyncio.AbstractEventLoop | None) -> None:
    """The outcomes of `batch`'s `submit_async` callers not handed yet, handed to each one's event
    loop in one call (their futures are done: answered, rejected or failed): from another thread
    with `call_soon_threadsafe` (a write to the loop's self-pipe, which wakes it), on the loop's
    own thread (`running`: a batch committed on the loop) with `call_soon`."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Command]] = {}
    for command in batch:
        if command.waiter is not None and not command.handed:
            command.handed = True
            by_loop.setdefault(command.waiter[0], []).append(command)
    for loop, commands in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            if loop is running:
                loop.call_soon(_resolve_waiters, commands)
            else:
                loop.call_soon_threadsafe(_resolve_waiters, commands)


def _resolve_waiters(commands: Sequence[_Command]) -> None:
    stages.stamp_all([command.stamps for command in commands], stages.RESOLVED)
    for command in commands:
        assert command.waiter is not None
        waiter = command.waiter[1]
        if waiter.done():  # the caller gave up meanwhile
            continue
        error = command.future.exception()
        if error is not None:
            waiter.set_exception(error)
        else:
            waiter.set_result(command.future.result())
