"""TableService over gRPC (asyncio): Act, Watch and WatchView (redacted per viewer, resumable), GetView.

Thin: authenticate the caller's seat, map the request to a domain command, let the group committer
(`commits.py`) decide and persist it with the other commands that arrived meanwhile, map the result
back. Streams are coroutines woken by the table's commits (`TableWakeups`); views and new events
come from memory, where the tables this process owns are authoritative (the event store is their
write-ahead log). A player sees only what `core.views.redact` lets their seat
see; the ops role watches with full information (ARCHITECTURE.md "Identity and hidden information").
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import functools
import logging
import threading
import time
import typing
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import TypeVar

import grpc
from mahjong.v1 import envelope_pb2, table_service_pb2_grpc
from mahjong.v1 import table_service_pb2 as messages
from mahjong_platform.aio_grpc_server import REJECTIONS, reject
from mahjong_platform.auth import EVERY_CALLER, OPS_ONLY, current_identity, role_table
from mahjong_platform.database import SessionFactory, read_transaction, transaction
from mahjong_platform.errors import (
    ConflictError,
    ErrorMapping,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    client_status,
)
from mahjong_platform.grpc_server import time_budget_seconds
from mahjong_platform.idempotency import check_idempotency_key, request_digest
from mahjong_rules import RulesError, format_tiles, parse_tiles
from sqlalchemy.orm import Session

from mahjong_table import codec, stages, wire
from mahjong_table.commits import Accepted, Deferral, Deferred, GroupCommitter, Rejection
from mahjong_table.core import commands
from mahjong_table.core.errors import InvalidCommandError, TableRuleError
from mahjong_table.core.events import NO_SEAT
from mahjong_table.core.views import redact
from mahjong_table.tables import TableChanges, TableEngine
from mahjong_table.variants import AnyTableState as TableState
from mahjong_table.visibility import CLAIM_WAIT_CAP_SECONDS, answer_envelopes, window_hidden_from
from mahjong_table.wire import REDACTED_PAYLOADS, seat_sequence

METHOD_ROLES = role_table(
    messages.DESCRIPTOR.services_by_name["TableService"],
    {
        "Act": EVERY_CALLER,
        "Watch": EVERY_CALLER,
        "GetView": EVERY_CALLER,
        "WatchView": EVERY_CALLER,
        "Play": EVERY_CALLER,
    },
)
"""Who may call what (deny by default): every caller, then the handlers check the seat; only ``ops``
watches with full information (``finance`` sees money, not hands)."""

IDEMPOTENCY_KEY_MAX_LENGTH = 128
TABLE_ID_MAX_LENGTH = 64
"""Table ids are UUIDs (36 characters); a longer one names no table and is refused as malformed."""
WATCH_POLL_SECONDS = 0.5
WATCH_BATCH_EVENTS = 500
WATCH_MAX_SECONDS = 4 * 3600.0
STORE_READ_THREADS = 4
CURRENT_READS_MAX = 3
"""Reads of a table's state and deadline from memory until they are of the same version
(`TableServicer._current`); a table this process did not write never matches (the store answers)."""
LAST_READS_TABLES_MAX = 4_096
"""Tables whose feeds' last read of events is kept (`TableServicer._events_up_to`)."""
_T = TypeVar("_T")
logger = logging.getLogger(__name__)

TABLE_ERROR_MAPPING: ErrorMapping = {
    InvalidCommandError: grpc.StatusCode.INVALID_ARGUMENT,
    TableRuleError: grpc.StatusCode.FAILED_PRECONDITION,
    RulesError: grpc.StatusCode.INVALID_ARGUMENT,
}


class Presence:
    """Which seats have a Watch stream open, and since when a seat has had none (for the
    reconnect grace of RULES.md 1.10). In memory: after a restart every seat gets a fresh grace, and
    so after a takeover (`rearm_where`)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._streams: dict[tuple[str, int], int] = {}
        self._away_since: dict[tuple[str, int], float] = {}

    def connected(self, table_id: str, seat: int) -> None:
        with self._lock:
            self._streams[(table_id, seat)] = self._streams.get((table_id, seat), 0) + 1
            self._away_since.pop((table_id, seat), None)

    def disconnected(self, table_id: str, seat: int) -> None:
        with self._lock:
            remaining = self._streams.get((table_id, seat), 1) - 1
            if remaining > 0:
                self._streams[(table_id, seat)] = remaining
            else:  # a seat with no stream open is not kept here, only since when it has had none
                self._streams.pop((table_id, seat), None)
                self._away_since[(table_id, seat)] = self._clock()

    def away_seconds(self, table_id: str, seat: int) -> float:
        """How long the seat has had no stream open; first asked = away from now on."""
        with self._lock:
            if self._streams.get((table_id, seat), 0) > 0:
                return 0.0
            since = self._away_since.setdefault((table_id, seat), self._clock())
            return self._clock() - since

    def rearm_where(self, taken_over: Callable[[str], bool]) -> None:
        """Forget since when the seats of the tables `taken_over(table_id)` names have had no
        stream here: another replica served them meanwhile (their streams were there), so each
        gets a fresh grace. Streams open here stay counted."""
        with self._lock:
            for key in [key for key in self._away_since if taken_over(key[0])]:
                del self._away_since[key]

    def keep_only(self, live_table_ids: Collection[str]) -> None:
        """Forget since when the seats of tables not in `live_table_ids` have had no stream (their
        games ended, or another replica serves them): only a live table's seats escape, and one
        served here again gets a fresh grace (as `rearm_where`). Streams open stay counted. The
        deadline worker calls it with the live tables it checks, once a second; before, a record
        of every seat of every table ever played stayed in memory."""
        live = set(live_table_ids)
        with self._lock:
            for key in [key for key in self._away_since if key[0] not in live]:
                del self._away_since[key]

    def remembered(self) -> int:
        """How many seats this process keeps a record of (a stream count or an absence)."""
        with self._lock:
            return len(self._streams) + len(self._away_since)


def seat_of(state: TableState, player_id: str) -> int:
    for seat in range(len(state.players)):
        if state.players[seat].player_id == player_id:
            return seat
    return NO_SEAT


def command_from_request(request: messages.ActRequest, seat: int) -> commands.TableCommand:
    """The domain command of an ActRequest; INVALID_ARGUMENT for a malformed one."""
    kind = request.WhichOneof("command")
    if kind == "exchange_three":
        try:
            tiles = parse_tiles(request.exchange_three.tiles)
        except RulesError as error:
            raise InvalidArgumentError(f"exchange_three.tiles: {error}") from None
        return commands.ExchangeThree(seat, tuple(format_tiles([tile]) for tile in tiles))
    if kind == "declare_missing_suit":
        return commands.DeclareMissingSuit(seat, request.declare_missing_suit.suit)
    if kind == "discard":
        return commands.Discard(seat, request.discard.tile)
    if kind == "pong":
        return commands.Pong(seat)
    if kind == "kong":
        return commands.Kong(seat, request.kong.tile or None)
    if kind == "win":
        return commands.Win(seat)
    if kind == "pass":
        return commands.Pass(seat)
    if kind == "leave":
        return commands.Leave(seat)
    if kind == "chow":
        return commands.Chow(seat, request.chow.tile)
    raise InvalidArgumentError(
        "command is required: one of exchange_three, declare_missing_suit, discard, pong, chow, kong, "
        "win, pass, leave"
    )


def redacted_envelope(
    envelope: envelope_pb2.Envelope, viewer_seat: int | None
) -> envelope_pb2.Envelope | None:
    """The envelope as `viewer_seat` may see it (None: full information, for ops). Public events
    and events the viewer may see whole are the stored envelope itself (no copy)."""
    if viewer_seat is None or envelope.WhichOneof("payload") not in REDACTED_PAYLOADS:
        return envelope
    event = codec.event_of(envelope)
    visible = redact(event, viewer_seat)
    if visible is None:
        return None
    if visible is event:
        return envelope
    redacted = envelope_pb2.Envelope()
    redacted.CopyFrom(envelope)
    payload_name = envelope.WhichOneof("payload")
    assert payload_name is not None
    getattr(redacted, payload_name).CopyFrom(codec.to_message(visible))
    return redacted


def seat_envelopes(
    envelopes: Sequence[envelope_pb2.Envelope], seat: int, hidden_at_last: int
) -> list[envelope_pb2.Envelope]:
    """The envelopes `seat` may see, redacted and numbered in the seat's own sequence.

    An event hidden from the seat (another seat's claim pass or claim timeout) takes no number of
    the seat's: a gap would tell it that someone could claim (`visibility`). ``envelopes`` are
    consecutive and end at a state version whose ``hidden_counts[seat]`` is ``hidden_at_last``; a
    visible event's number is its stored sequence less the hidden events before it.
    """
    numbered: list[envelope_pb2.Envelope] = []
    hidden_after = 0
    for envelope in reversed(envelopes):
        visible = redacted_envelope(envelope, seat)
        if visible is None:
            hidden_after += 1
            continue
        number = envelope.sequence - (hidden_at_last - hidden_after)
        if number != visible.sequence:
            if visible is envelope:  # the stored envelope, shared: number a copy
                visible = envelope_pb2.Envelope()
                visible.CopyFrom(envelope)
            visible.sequence = number
        numbered.append(visible)
    numbered.reverse()
    return numbered


class TableWakeups:
    """The asyncio side of `TableChanges`: a stream awaits its table's next change on the event
    loop instead of holding a thread. Committers (any thread) hand each change to the loop."""

    def __init__(self, changes: TableChanges) -> None:
        self._changes = changes
        self._loop: asyncio.AbstractEventLoop | None = None
        # The loop with the thread it runs on (`threading.get_ident`), set together and read whole.
        self._loop_on: tuple[asyncio.AbstractEventLoop | None, int] = (None, 0)
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        changes.add_listener(self._changed)

    def _changed(self, table_ids: Sequence[str]) -> None:
        loop, loop_thread = self._loop_on
        if loop is not None and not loop.is_closed():
            # One more turn of the loop before the wake-up: the group commit hands a batch's
            # answers to the loop just before (`commits`), so the commands' tasks and the
            # Play streams they answer run before the view updates of every seat it woke.
            if threading.get_ident() == loop_thread:
                # Committed on the loop's own thread (`commits`: a batch run by a callback of
                # the loop): queued as `call_soon_threadsafe` queues it, without its write to
                # the loop's self-pipe (a system call, and one more wake-up of the loop).
                loop.call_soon(loop.call_soon, self._wake, table_ids)
                return
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
                loop.call_soon_threadsafe(loop.call_soon, self._wake, table_ids)

    def call_after_wakeups(self, callback: Callable[[], object]) -> bool:
        """Call `callback()` on the loop (from any thread) after the streams woken by every change
        handed to it so far have taken their next step (one turn of the loop after their wake-up:
        a stream that finds the change in memory has taken it in by then). For tests that must
        act after a stream saw a change, a state the server reaches rather than a time. False
        (nothing called) when no stream ever waited here."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return False
        loop.call_soon_threadsafe(loop.call_soon, loop.call_soon, callback)
        return True

    def _wake(self, table_ids: Sequence[str]) -> None:
        for table_id in table_ids:
            for future in self._waiters.pop(table_id, ()):
                if not future.done():
                    future.set_result(None)

    async def wait(
        self,
        table_id: str,
        seen_version: int,
        timeout_seconds: float | None,
        future: asyncio.Future[None] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """Return once the table is past `seen_version`, or after `timeout_seconds`, or once
        `future` (given: another reason to wake, say a Play stream's answer) is done. `loop`: the
        running loop, when the caller has it (`asyncio.get_running_loop` costs a `getpid` system
        call on Python 3.11, and a stream waits several times per command). `timeout_seconds`
        None: no timer of its own (the caller knows that `future` is done in time: a Play
        stream's hold alarm, `_PlayStream.arm_hold`)."""
        if loop is None:
            loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop = loop
            self._loop_on = (loop, threading.get_ident())
        if self._changes.version(table_id) > seen_version:
            return
        if future is None:
            future = loop.create_future()
        waiters = self._waiters.setdefault(table_id, [])
        waiters.append(future)
        timer = None if timeout_seconds is None else loop.call_later(timeout_seconds, _release, future)
        try:
            await future
        finally:
            if timer is not None:
                timer.cancel()
            # A wake-up took the table's whole list (`_wake`): nothing to remove then.
            if self._waiters.get(table_id) is waiters:
                with contextlib.suppress(ValueError):
                    waiters.remove(future)
                if not waiters:
                    del self._waiters[table_id]


def _release(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


ACT_METHOD = "/mahjong.v1.TableService/Act"


PLAY_METHOD = "/mahjong.v1.TableService/Play"
PLAY_COMMANDS_IN_FLIGHT = 4
"""Commands of one Play stream waiting for their answers at once (a player decides one at a time)."""
PLAY_FINAL_ANSWERS_SECONDS = 5.0
PLAY_ANSWERS_UNSENT_MAX = 16
"""Answers a Play stream may hold unsent (its client not reading) before it stops reading commands."""
PLAY_ANSWER_RIDE_SECONDS = 0.005
"""With `PlayOptions.answers_with_updates`: how long an applied command's answer waits for an
update to ride on before it goes alone, while no claim window hides the seat's updates (the
update is then normally ready at once). While a window that does not ask the seat is open (its
discard can be claimed; another asked seat still decides) the answer waits for the window
however long it lasts, and rides on the update after it: an answer going alone would tell the
seat that another hand can claim, from the shape of what it receives (`visibility`)."""
PLAY_WAIT_FOR_TABLE_MS_MAX = 30_000
"""The longest `PlayOptions.wait_for_table_ms` (a table opens well under a second after matchmaking
formed it, unless the table engine's consumer is recovering: then the client asks again)."""
PLAY_HOLD_IDLE_UPDATES_MS_MAX = 1_000
"""The longest `PlayOptions.hold_idle_updates_ms`: the seats that only watch the table move see it
move at most this much later."""
PLAY_OPENING_WAITS_MAX = 4_096
"""Play streams of this process waiting for their tables to open at once (each costs a waiter and
a timer); a stream beyond is answered NOT_FOUND at once, as without the wait."""


class _WindowHiddenError(Deferred):
    """A claim window that does not ask the actor opened before its command was decided."""


class _Refused(Exception):
    """A command the group committer refused (its status and message), on a Play stream."""

    def __init__(self, status_code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


def _status_of(error: Exception) -> tuple[grpc.StatusCode, str]:
    """The status and message a Play answer carries for `error`: what Act's error mapping answers
    (`errors.client_status`: a lost database connection is UNAVAILABLE with a fixed message; an
    unexpected error is logged with a reference and is INTERNAL with only that reference)."""
    if isinstance(error, _Refused):
        return error.status_code, error.message
    status = client_status(error, TABLE_ERROR_MAPPING)
    if status is not None:
        return status
    reference = uuid.uuid4().hex
    logger.error(
        "a Play command failed with an unexpected exception",
        exc_info=error,
        extra={"rpc_method": PLAY_METHOD, "status_code": "INTERNAL", "error_reference": reference},
    )
    return grpc.StatusCode.INTERNAL, f"internal error (reference {reference})"


class _PlayStream:
    """One Play stream's commands in flight and the answers not sent yet (serialized
    `PlayAnswer`s, `wire.answer_bytes`); an answer wakes the stream's feed (`wake_on`, the
    future its wait is on).

    `answers_with_updates` (`PlayOptions`): the answers ride on the next update. An applied
    command's answer waits for it at most PLAY_ANSWER_RIDE_SECONDS, then goes alone, except
    while a claim window hidden from the seat is open: then it rides on the update after it; any other
    answer (a refusal, a retry's first answer: no update follows them) makes every answer not
    sent yet go at once (`ride_seconds`)."""

    def __init__(self, answers_with_updates: bool = False) -> None:
        self.answers_with_updates = answers_with_updates
        self.answers: collections.deque[bytes] = collections.deque()
        self.timelines: collections.deque[stages.Timeline | None] = collections.deque()  # `stages`
        self._ride_until = 0.0
        self._alone_now = False
        self.in_flight = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.wake_on: asyncio.Future[None] | None = None
        self.room_for_answers = asyncio.Event()
        self.room_for_answers.set()
        # While updates are held: the one timer that wakes the feed when the hold runs out
        # (`arm_hold`), instead of a timer for each wait of the hold; None once it rang.
        self.hold_alarm: asyncio.TimerHandle | None = None
        self.hold_until = 0.0

    def arm_hold(self, loop: asyncio.AbstractEventLoop, until: float) -> None:
        """Wake the feed's wait (`wake_on`) at `until` (`time.monotonic()`, the loop's clock),
        when the oldest held update must go: the feed's waits of the hold then need no timer of
        their own (`TableServicer._wait`)."""
        self.disarm_hold()
        self.hold_until = until
        self.hold_alarm = loop.call_later(max(0.0, until - time.monotonic()), self._hold_ran_out)

    def disarm_hold(self) -> None:
        """No hold any more (what was held went): its alarm is cancelled."""
        if self.hold_alarm is not None:
            self.hold_alarm.cancel()
            self.hold_alarm = None

    def _hold_ran_out(self) -> None:
        self.hold_alarm = None
        future = self.wake_on
        if future is not None and not future.done():
            future.set_result(None)

    def alarm_wakes_by(self, seconds: float) -> bool:
        """Whether the hold's alarm, still to ring, wakes the feed within `seconds` from now."""
        return self.hold_alarm is not None and self.hold_until - time.monotonic() <= seconds

    def next_answer(self) -> bytes:
        """The oldest answer not sent yet, as a `PlayResponse` of its own."""
        answer = self.answers.popleft()
        if stages.ENABLED:
            self._composed(1)
        if len(self.answers) < PLAY_ANSWERS_UNSENT_MAX:
            self.room_for_answers.set()
        if not self.answers:
            self._alone_now = False
        return wire.play_answer_response(answer)

    def with_answers(self, update: bytes) -> bytes:
        """The `PlayResponse` of `update` with every answer not sent yet riding on it."""
        answers = list(self.answers)
        self.answers.clear()
        if stages.ENABLED:
            self._composed(len(answers))
        self.room_for_answers.set()
        self._alone_now = False
        return wire.play_answered_update_bytes(update, answers)

    def _composed(self, count: int) -> None:
        for _ in range(count):
            stamps = self.timelines.popleft()
            stages.stamp(stamps, stages.COMPOSED)
            stages.RECORDER.finished(stamps)

    def rides(self) -> bool:
        """Whether the answers not sent yet wait for an update to ride on (opted in, and none of
        them is one that goes alone at once): up to `ride_seconds`, or past a claim window hidden
        from the seat however long it lasts."""
        return self.answers_with_updates and not self._alone_now

    def owes_alone(self) -> bool:
        """Whether answers not sent yet will go alone (not riding on an update)."""
        return bool(self.answers) and not self.rides()

    def ride_seconds(self) -> float:
        """How much longer the answers not sent yet may wait for an update to ride on (at most
        0: send them now)."""
        if not self.rides():
            return 0.0
        return self._ride_until - time.monotonic()

    def answered(self, answer: bytes, applied: bool = False, stamps: stages.Timeline | None = None) -> None:
        """`answer` to one of the stream's commands; `applied`: it appended events (an update
        showing them follows, unless a claim window holds the seat's updates back)."""
        self.in_flight -= 1
        stages.stamp(stamps, stages.ANSWERED)
        self._send(answer, applied, stamps)

    def refuse(self, idempotency_key: str, status_code: grpc.StatusCode, message: str) -> None:
        REJECTIONS.count(PLAY_METHOD, status_code)
        self._send(wire.answer_bytes(idempotency_key, status_code.value[0], message))

    def _send(self, answer: bytes, applied: bool = False, stamps: stages.Timeline | None = None) -> None:
        if stages.ENABLED:
            self.timelines.append(stamps)
        if not self.answers:
            self._ride_until = time.monotonic() + PLAY_ANSWER_RIDE_SECONDS
        self._alone_now = self._alone_now or not applied
        self.answers.append(answer)
        if len(self.answers) >= PLAY_ANSWERS_UNSENT_MAX:
            self.room_for_answers.clear()
        future = self.wake_on
        if future is not None and not future.done():
            future.set_result(None)


class TableServicer(table_service_pb2_grpc.TableServiceServicer):
    """The asyncio servicer (`mahjong_platform.aio_grpc_server`): streams are coroutines, Acts go
    through the group committer, and reads come from memory (a thread runs the rare store read)."""

    def __init__(
        self,
        session_factory: SessionFactory,
        engine: TableEngine,
        presence: Presence,
        committer: GroupCommitter | None = None,
    ) -> None:
        self._session_factory = session_factory
        self._engine = engine
        self._presence = presence
        self._committer = committer or GroupCommitter(engine, self._transaction, TABLE_ERROR_MAPPING)
        self._wakeups = TableWakeups(engine.changes)
        self._store_reads = ThreadPoolExecutor(
            max_workers=STORE_READ_THREADS, thread_name_prefix="table-reads"
        )
        # Per table, its feeds' last read (`_events_up_to`): after, up to, the events (on the loop).
        self._last_reads: dict[str, tuple[int, int, list[envelope_pb2.Envelope]]] = {}
        self._opening_waits = 0  # Play streams waiting for their tables to open (`_seat_once_open`)
        self._reads_in_flight: dict[tuple[object, ...], asyncio.Future[typing.Any]] = {}  # `_shared_read`

    @property
    def wakeups(self) -> TableWakeups:
        """How the streams of this servicer wait for their tables' changes."""
        return self._wakeups

    def _transaction(self) -> AbstractContextManager[Session]:
        return transaction(self._session_factory)

    def _read_transaction(self) -> AbstractContextManager[Session]:
        return read_transaction(self._session_factory)

    async def _off_loop(self, function: Callable[..., _T], *arguments: object) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._store_reads, function, *arguments)

    async def _shared_read(
        self, key: tuple[object, ...], function: Callable[..., _T], *arguments: object
    ) -> _T:
        """`_off_loop(function, *arguments)`, one store read for the callers that ask the same `key`
        while it runs: the four seats of a table open their streams together, and each asked the
        store for the same state and events (a read each, in a thread). The read is shielded: a
        caller that goes away does not cancel it for the others."""
        reading = self._reads_in_flight.get(key)
        if reading is None:
            reading = asyncio.ensure_future(self._off_loop(function, *arguments))
            self._reads_in_flight[key] = reading
            reading.add_done_callback(functools.partial(self._read_done, key))
        return typing.cast(_T, await asyncio.shield(reading))

    def _read_done(self, key: tuple[object, ...], reading: asyncio.Future[object]) -> None:
        if self._reads_in_flight.get(key) is reading:
            del self._reads_in_flight[key]
        if not reading.cancelled():
            reading.exception()  # retrieved: every caller that waited got it already

    async def _state(self, table_id: str) -> TableState:
        state = self._engine.cached_state(table_id)
        if state is not None:
            return state
        return await self._shared_read(
            ("state", table_id), self._engine.read_state, self._read_transaction, table_id
        )

    def _current(self, table_id: str) -> tuple[TableState, bool, datetime.datetime | None] | None:
        """The table's state from memory (None: the store must be asked, `_state`) with whether
        its deadline is known and the deadline, read together: the writer records a version's
        deadline before it publishes the state, so a deadline of a later version than the state
        read means the writer published meanwhile, and the state is read again (the deadline of
        the state read first would have been asked of the store, which answers the table's
        current deadline, a later version's, and costs a read off the loop)."""
        state = self._engine.cached_state(table_id)
        for _ in range(CURRENT_READS_MAX):
            if state is None:
                return None
            known, deadline = self._engine.known_deadline(state)
            if known:
                return state, True, deadline
            state = self._engine.cached_state(table_id)
        return None if state is None else (state, False, None)

    async def _deadline_of(self, state: TableState) -> datetime.datetime | None:
        known, deadline = self._engine.known_deadline(state)
        if known:
            return deadline
        return await self._shared_read(
            ("deadline", state.table_id, state.version),
            self._engine.deadline_of,
            self._read_transaction,
            state,
        )

    async def _events_after(
        self, table_id: str, after: int, *, at_least_up_to: int = 0
    ) -> list[envelope_pb2.Envelope]:
        recent = self._engine.recent_events_after(
            table_id, after, WATCH_BATCH_EVENTS, at_least_up_to=at_least_up_to
        )
        if recent is not None:
            return recent
        return await self._shared_read(
            ("events", table_id, after, at_least_up_to),
            functools.partial(
                self._engine.events_after,
                self._read_transaction,
                table_id,
                after,
                WATCH_BATCH_EVENTS,
                at_least_up_to=at_least_up_to,
            ),
        )

    async def _caller_seat(self, table_id: str) -> tuple[TableState, int | None]:
        """The table and the caller's seat (None for ops watching with full information)."""
        if not 0 < len(table_id) <= TABLE_ID_MAX_LENGTH:
            raise InvalidArgumentError(f"table_id must be 1..{TABLE_ID_MAX_LENGTH} characters")
        identity = current_identity()
        state = await self._state(table_id)
        seat = seat_of(state, identity.player_id)
        if seat != NO_SEAT:
            return state, seat
        if identity.has_any_role(OPS_ONLY):
            return state, None
        raise PermissionDeniedError(f"player {identity.player_id!r} has no seat at table {table_id}")

    async def _state_after_hidden_window(self, table_id: str, seat: int, wait_until: float) -> TableState:
        """The table once no claim window that does not ask `seat` is open (waiting while one is):
        such a seat is answered as if the next seat had drawn at once (`visibility`)."""
        state = await self._state(table_id)
        while window_hidden_from(state, seat):
            remaining = wait_until - time.monotonic()
            if remaining <= 0:
                raise ConflictError(f"table {table_id} is busy: retry")
            await self._wakeups.wait(table_id, state.version, min(remaining, WATCH_POLL_SECONDS))
            state = await self._state(table_id)
        return state

    async def Act(
        self, request: messages.ActRequest, context: grpc.aio.ServicerContext
    ) -> messages.ActResponse:
        check_idempotency_key(request.idempotency_key, IDEMPOTENCY_KEY_MAX_LENGTH)
        _state, seat = await self._caller_seat(request.table_id)
        if seat is None:
            raise PermissionDeniedError("only a seated player can act at a table")
        wait_until = time.monotonic() + time_budget_seconds(context, CLAIM_WAIT_CAP_SECONDS)
        outcome = await self._decided(request, seat, wait_until)
        if isinstance(outcome, Rejection):
            # An expected refusal (the table moved on, not your turn): counted, not logged or raised.
            reject(context, outcome.status_code, outcome.message, ACT_METHOD)
            return messages.ActResponse()
        return messages.ActResponse.FromString(outcome.answer)

    async def _decided(
        self,
        request: messages.ActRequest,
        seat: int,
        wait_until: float,
        stamps: stages.Timeline | None = None,
    ) -> Accepted | Rejection:
        """Decide and commit one command of `seat` (Act's and Play's common path): waited while a
        claim window that does not ask the seat is open, answered as `visibility` says."""
        command = command_from_request(request, seat)
        expected_sequence = request.expected_sequence
        table_id = request.table_id

        def command_for(current: TableState) -> commands.TableCommand:
            if window_hidden_from(current, seat):
                raise _WindowHiddenError  # nothing written; wait for the window to close, then decide
            # The optimistic check a client may ask for: it decided on the view at that sequence.
            if expected_sequence and expected_sequence != seat_sequence(current, seat):
                raise ConflictError(
                    f"table {table_id} is at sequence {seat_sequence(current, seat)}, the command was "
                    f"decided at {expected_sequence}: refresh the view and decide again"
                )
            return command

        def answer_of(new_state: TableState, envelopes: list[envelope_pb2.Envelope]) -> bytes:
            answered = answer_envelopes(seat_envelopes(envelopes, seat, new_state.hidden_counts[seat]))
            sequence = answered[-1].sequence if answered else seat_sequence(new_state, seat)
            return messages.ActResponse(sequence=sequence, events=answered).SerializeToString()

        idempotency = (current_identity().player_id, request.idempotency_key, request_digest(request))
        while True:
            await self._state_after_hidden_window(table_id, seat, wait_until)
            outcome = await self._committer.submit_async(
                table_id, command_for, answer_of, idempotency=idempotency, stamps=stamps
            )
            if not isinstance(outcome, Deferral):
                return outcome

    async def Watch(
        self, request: messages.WatchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[envelope_pb2.Envelope]:
        if request.after_sequence < 0:
            raise InvalidArgumentError("after_sequence must not be negative")
        _state, seat = await self._caller_seat(request.table_id)
        events = (
            self._full_events(request.table_id, request.after_sequence)
            if seat is None
            else self._seat_events(request.table_id, seat, request.after_sequence)
        )
        if seat is not None:
            self._presence.connected(request.table_id, seat)
        try:
            async for envelope in events:
                yield envelope
        finally:
            if seat is not None:
                self._presence.disconnected(request.table_id, seat)

    async def _full_events(self, table_id: str, after: int) -> AsyncIterator[envelope_pb2.Envelope]:
        """Ops: the stored events with full information and stored sequences, until the game ends."""
        started = time.monotonic()
        while time.monotonic() - started < WATCH_MAX_SECONDS:
            envelopes = await self._events_after(table_id, after)
            for envelope in envelopes:
                after = envelope.sequence
                yield envelope
                if envelope.WhichOneof("payload") == "game_ended":
                    return
            if not envelopes:
                await self._wakeups.wait(table_id, after, WATCH_POLL_SECONDS)

    async def _seat_events(
        self, table_id: str, seat: int, after_seat_sequence: int
    ) -> AsyncIterator[envelope_pb2.Envelope]:
        """A seat's events, redacted, in its own numbering (`seat_envelopes`), until the game ends.

        Read up to a state version each time, whose hidden count numbers them. A seat's number is
        never above the stored one, so reading from the stored sequence equal to the seat's cursor
        covers every event the seat has not seen yet.
        """
        stored_after = after_seat_sequence
        started = time.monotonic()
        while time.monotonic() - started < WATCH_MAX_SECONDS:
            state = await self._state(table_id)
            if window_hidden_from(state, seat):
                # As WatchView: nothing while a window that does not ask this seat is open, so the
                # discard arrives with what followed it, never alone as a sign of the window.
                await self._wakeups.wait(table_id, state.version, WATCH_POLL_SECONDS)
                continue
            if state.version <= stored_after:
                await self._wakeups.wait(table_id, stored_after, WATCH_POLL_SECONDS)
                continue
            envelopes = await self._events_up_to(table_id, stored_after, state.version)
            if envelopes is None:
                await self._wakeups.wait(table_id, state.version, WATCH_POLL_SECONDS)
                continue
            stored_after = state.version
            for envelope in seat_envelopes(envelopes, seat, state.hidden_counts[seat]):
                if envelope.sequence <= after_seat_sequence:
                    continue
                after_seat_sequence = envelope.sequence
                yield envelope
                if envelope.WhichOneof("payload") == "game_ended":
                    return

    async def _events_up_to(
        self, table_id: str, after: int, version: int
    ) -> list[envelope_pb2.Envelope] | None:
        """The stored events after `after` up to `version` exactly, or None when the store does not
        show them all yet (never numbered against a state they do not reach).

        The seats' feeds of a table wake together and ask for the same events: the last read of
        each table is kept (committed events never change), so one read serves all four. The
        list is shared: its readers never change it."""
        last = self._last_read(table_id, after, version)
        if last is not None:
            return last
        envelopes = await self._read_events_up_to(table_id, after, version)
        if envelopes is not None:
            self._last_reads.pop(table_id, None)
            self._last_reads[table_id] = (after, version, envelopes)
            if len(self._last_reads) > LAST_READS_TABLES_MAX:
                del self._last_reads[next(iter(self._last_reads))]
        return envelopes

    def _last_read(self, table_id: str, after: int, version: int) -> list[envelope_pb2.Envelope] | None:
        """The table's feeds' last read (`_events_up_to`) when it is of exactly these events."""
        last = self._last_reads.get(table_id)
        if last is not None and last[0] == after and last[1] == version:
            return last[2]
        return None

    async def _read_events_up_to(
        self, table_id: str, after: int, version: int
    ) -> list[envelope_pb2.Envelope] | None:
        envelopes: list[envelope_pb2.Envelope] = []
        read_up_to = after
        while read_up_to < version:
            batch = await self._events_after(table_id, read_up_to, at_least_up_to=version)
            if not batch:
                return None
            for envelope in batch:
                if envelope.sequence > version:
                    break  # newer than the state: the next read carries it
                read_up_to = envelope.sequence
                envelopes.append(envelope)
        return envelopes if read_up_to == version else None

    async def WatchView(  # type: ignore[override]  # yields the serialized updates (`wire`)
        self, request: messages.WatchViewRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        if request.after_sequence < 0:
            raise InvalidArgumentError("after_sequence must not be negative")
        _state, seat = await self._caller_seat(request.table_id)
        if seat is None:
            raise PermissionDeniedError("WatchView follows a seat's view; ops use Watch for full information")
        self._presence.connected(request.table_id, seat)
        try:
            async for update in self._view_updates(request.table_id, seat, request.after_sequence):
                if update is not None:
                    yield update[0]
        finally:
            self._presence.disconnected(request.table_id, seat)

    async def _view_updates(
        self,
        table_id: str,
        seat: int,
        after_seat_sequence: int,
        play: _PlayStream | None = None,
        hold_seconds: float = 0.0,
    ) -> AsyncIterator[tuple[bytes, bool] | None]:
        """A seat's feed (WatchView's, and Play's): the view now, then after every change the new
        events with the view after them, until the game ends, each update a serialized
        `TableUpdate` (`wire`: its parts serialized once, not once per seat and update) with
        whether answers may ride on it. With `play`, None is yielded when the stream has answers
        to send, and no update is built while one of its commands is in flight, so a command's
        answer always comes before any update after it, whether or not a claim window delayed the
        command (`visibility`).

        An update carries every event since the previous one: a stream that was not pulled while
        the table moved on (its client reads slowly, the loop was busy) sends the events of several
        changes in one update, with the view after the last.

        With `play`, the answers ready when an update is ready go out just before it (or, opted
        in, riding on it: `Play`); answers with no update ready now go out alone at once (None).

        `hold_seconds` (`PlayOptions.hold_idle_updates_ms`): an update that gives the seat nothing
        to decide is held, and the updates after it are merged into it (their events after its
        events, the latest view: the same update as a stream not pulled meanwhile sends), until
        an update gives the seat a decision or ends the game (then everything goes at once), until
        answers go alone (what is held goes just before them, and while a command's answers wait
        to go alone no update is built: what is held never shows a command its answer did not
        precede), or until the oldest held update has waited `hold_seconds` (then it goes without
        riding answers: an answer held back by a hidden claim window must not ride on it). Each of
        these moments is one the seat's own feed shows without the hold (when an update became
        ready, what it shows, its own answers), so the hold tells the seat nothing about another
        seat (`visibility`)."""
        stored_after = after_seat_sequence  # a seat's number is never above the stored one
        started = time.monotonic()
        loop = asyncio.get_running_loop()  # once: each call is a `getpid` system call (3.11)
        first = True
        last_view: bytes | None = None  # the view of `last_state` (None: not built, held)
        last_state: TableState | None = None  # the state of the last update sent or held
        # While updates are held: their events, the deadline of the last, when they go at the latest.
        held_events: list[bytes] = []
        held_deadline: datetime.datetime | None = None
        held_until = 0.0
        while time.monotonic() - started < WATCH_MAX_SECONDS:
            if held_until and time.monotonic() >= held_until:
                assert last_state is not None
                yield _held_update(held_events, last_state, seat, held_deadline), False
                held_events, held_until = [], 0.0
                if play is not None:
                    play.disarm_hold()
            # The table's state and the events up to it come from memory almost always: asked
            # without a coroutine first (`_state`, `_events_up_to` are the same with the store).
            cached = self._current(table_id)
            if cached is None:
                state, deadline_known, deadline = await self._state(table_id), False, None
            else:
                state, deadline_known, deadline = cached
            envelopes: list[envelope_pb2.Envelope] | None = None
            hidden = window_hidden_from(state, seat)
            if hidden:
                # No update while a window that does not ask this seat is open: the discard then
                # arrives with what followed it, exactly as when nobody could claim.
                wait_past = state.version
            elif not first and state.version <= stored_after:
                wait_past = stored_after
            elif play is not None and (play.in_flight or play.owes_alone()):
                # Answers that go alone go before this update is built (they go before it anyway).
                wait_past = state.version
            else:
                envelopes = self._last_read(table_id, stored_after, state.version)
                if envelopes is None:
                    envelopes = await self._events_up_to(table_id, stored_after, state.version)
                # None: never a view ahead of its events; look again once the store shows them.
                wait_past = state.version
            if envelopes is None:
                seconds = WATCH_POLL_SECONDS
                if held_until:
                    seconds = max(0.0, min(seconds, held_until - time.monotonic()))
                if play is None or not play.answers or (hidden and play.rides()):
                    await self._wait(table_id, wait_past, play, seconds, loop)
                elif (ride_seconds := play.ride_seconds()) > 0:
                    await self._wait(table_id, wait_past, play, min(ride_seconds, seconds), loop)
                else:
                    if held_until:
                        assert last_state is not None
                        yield _held_update(held_events, last_state, seat, held_deadline), False
                        held_events, held_until = [], 0.0
                        play.disarm_hold()
                    yield None
                continue
            stored_after = state.version
            events = wire.seat_event_bytes(envelopes, seat, state.hidden_counts[seat], after_seat_sequence)
            after_seat_sequence = seat_sequence(state, seat)
            view: bytes | None = None
            if not events and last_state is not None:
                view = wire.view_bytes(state, seat)
                if last_view is None:
                    last_view = wire.view_bytes(last_state, seat)
                if _same_view(view, last_view):
                    # Only events hidden from this seat happened (another seat asked in the same
                    # claim window passed): an update now would tell it that someone else could claim.
                    continue
            last_state, last_view = state, view
            if (
                hold_seconds
                and not first
                and not state.is_over
                and not (play is not None and play.answers and play.rides())
                and not wire.decides(state, seat)
            ):
                # Held: its view is built when it goes (the state is immutable), its deadline now.
                if not held_until:
                    held_until = time.monotonic() + hold_seconds
                    if play is not None:
                        play.arm_hold(loop, held_until)
                held_events.extend(events)
                held_deadline = deadline if deadline_known else await self._deadline_of(state)
                now = time.monotonic()
                if now < held_until and (play is None or not play.answers):
                    # What the next turn of the loop would do unless the table moved on meanwhile
                    # (then the wait returns at once): wait past this version, at most until
                    # the hold runs out.
                    await self._wait(
                        table_id, state.version, play, min(WATCH_POLL_SECONDS, held_until - now), loop
                    )
                continue
            if view is None:
                view = last_view = wire.view_bytes(state, seat)
            first = False
            if held_until:
                events = held_events + events
                held_events, held_until = [], 0.0
                if play is not None:
                    play.disarm_hold()
            if not deadline_known:
                deadline = await self._deadline_of(state)
            yield wire.update_bytes(events, view + wire.deadline_bytes(deadline)), True
            if state.is_over:
                return
            if play is None or not play.answers:
                # As above: the next turn of the loop would find this version and wait past it.
                await self._wait(table_id, state.version, play, WATCH_POLL_SECONDS, loop)
        if held_until:
            assert last_state is not None
            yield _held_update(held_events, last_state, seat, held_deadline), False

    async def _wait(
        self,
        table_id: str,
        seen_version: int,
        play: _PlayStream | None,
        seconds: float = WATCH_POLL_SECONDS,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """Until the table is past `seen_version` (or `seconds` passed), or, for a Play stream,
        until it has a new answer. `loop`: the running loop, when the caller has it."""
        if play is None:
            await self._wakeups.wait(table_id, seen_version, seconds, loop=loop)
            return
        if loop is None:
            loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        play.wake_on = future
        try:
            # The hold's alarm rings no later than `seconds` from now: it is this wait's timer.
            timeout = None if play.alarm_wakes_by(seconds) else seconds
            await self._wakeups.wait(table_id, seen_version, timeout, future, loop)
        finally:
            play.wake_on = None

    async def Play(  # type: ignore[override]  # yields the serialized responses (`wire`)
        self, requests: AsyncIterator[messages.PlayRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        iterator = requests.__aiter__()
        try:
            first = await iterator.__anext__()
        except StopAsyncIteration:
            raise InvalidArgumentError("a Play stream starts with an open request") from None
        if first.WhichOneof("request") != "open":
            raise InvalidArgumentError(
                "the first request of a Play stream must be open (table_id, after_sequence)"
            )
        table_id, after_sequence = first.open.table_id, first.open.after_sequence
        options = first.options
        if after_sequence < 0:
            raise InvalidArgumentError("after_sequence must not be negative")
        if not 0 <= options.wait_for_table_ms <= PLAY_WAIT_FOR_TABLE_MS_MAX:
            raise InvalidArgumentError(f"options.wait_for_table_ms must be 0..{PLAY_WAIT_FOR_TABLE_MS_MAX}")
        if not 0 <= options.hold_idle_updates_ms <= PLAY_HOLD_IDLE_UPDATES_MS_MAX:
            raise InvalidArgumentError(
                f"options.hold_idle_updates_ms must be 0..{PLAY_HOLD_IDLE_UPDATES_MS_MAX}"
            )
        seat = await self._seat_once_open(table_id, options.wait_for_table_ms / 1000)
        play = _PlayStream(options.answers_with_updates)
        reader = asyncio.create_task(self._read_commands(iterator, table_id, seat, play))
        self._presence.connected(table_id, seat)
        hold_seconds = options.hold_idle_updates_ms / 1000
        try:
            async for item in self._view_updates(table_id, seat, after_sequence, play, hold_seconds):
                if item is not None and not item[1]:
                    yield wire.play_update_bytes(item[0])  # held past its wait: no answer rides
                    continue
                update = None if item is None else item[0]
                if update is not None and play.answers_with_updates:
                    yield play.with_answers(update)
                    continue
                while play.answers:
                    yield play.next_answer()
                if update is not None:
                    yield wire.play_update_bytes(update)
            # The game is over: the commands still in flight are answered (refused) first.
            if play.tasks:
                await asyncio.wait(set(play.tasks), timeout=PLAY_FINAL_ANSWERS_SECONDS)
            while play.answers:
                yield play.next_answer()
        finally:
            play.disarm_hold()
            reader.cancel()
            for task in list(play.tasks):
                task.cancel()  # as a cancelled Act: skipped unless its batch is being written
            self._presence.disconnected(table_id, seat)

    async def _seat_once_open(self, table_id: str, wait_seconds: float) -> int:
        """The caller's seat at `table_id` (`_caller_seat`: PERMISSION_DENIED for a caller not
        seated there, ops included), waiting up to `wait_seconds` for a table not open yet
        (matchmaking formed it; the table engine opens it once it reads the assignment) instead
        of NOT_FOUND at once. The wait tells a caller nothing that asking again would not: the
        table's opening wakes it (`TableChanges`), and it is answered as an ask at that moment
        would be. At most PLAY_OPENING_WAITS_MAX streams wait at once; beyond, NOT_FOUND at once."""
        wait_until = time.monotonic() + wait_seconds
        while True:
            try:
                _state, seat = await self._caller_seat(table_id)
            except NotFoundError:
                remaining = wait_until - time.monotonic()
                if remaining <= 0 or self._opening_waits >= PLAY_OPENING_WAITS_MAX:
                    raise
                self._opening_waits += 1
                try:
                    await self._wakeups.wait(table_id, 0, remaining)
                finally:
                    self._opening_waits -= 1
                continue
            if seat is None:
                raise PermissionDeniedError(
                    "Play is a seated player's stream; ops use Watch for full information"
                )
            return seat

    async def _read_commands(
        self, requests: AsyncIterator[messages.PlayRequest], table_id: str, seat: int, play: _PlayStream
    ) -> None:
        """A Play stream's commands, each decided in a task of its own (at most
        PLAY_COMMANDS_IN_FLIGHT at once), until the client stops sending."""
        loop = asyncio.get_running_loop()  # once: each call is a `getpid` system call (3.11)
        async for request in requests:
            # A client that sends without reading its answers is not read further until it does.
            if not play.room_for_answers.is_set():
                await play.room_for_answers.wait()
            if request.WhichOneof("request") != "act":
                play.refuse(
                    "", grpc.StatusCode.INVALID_ARGUMENT, "after open, a Play stream takes act requests"
                )
                continue
            if play.in_flight >= PLAY_COMMANDS_IN_FLIGHT:
                play.refuse(
                    request.act.idempotency_key,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"at most {PLAY_COMMANDS_IN_FLIGHT} commands of a Play stream may wait for answers",
                )
                continue
            play.in_flight += 1
            stamps = stages.timeline()
            task = loop.create_task(self._play_command(request.act, table_id, seat, play, stamps))
            play.tasks.add(task)
            task.add_done_callback(play.tasks.discard)

    async def _play_command(
        self,
        request: messages.ActRequest,
        table_id: str,
        seat: int,
        play: _PlayStream,
        stamps: stages.Timeline | None = None,
    ) -> None:
        """One command of a Play stream, answered as Act would answer it."""
        stages.stamp(stamps, stages.TASK)
        try:
            if request.table_id and request.table_id != table_id:
                raise InvalidArgumentError(
                    f"this Play stream plays table {table_id}, not {request.table_id[:64]}"
                )
            request.table_id = table_id  # so the request digest is Act's for the same command
            check_idempotency_key(request.idempotency_key, IDEMPOTENCY_KEY_MAX_LENGTH)
            outcome = await self._decided(request, seat, time.monotonic() + CLAIM_WAIT_CAP_SECONDS, stamps)
            if isinstance(outcome, Rejection):
                raise _Refused(outcome.status_code, outcome.message)
            answer = wire.answer_bytes(request.idempotency_key, result=outcome.answer)
        except Exception as error:
            code, message = _status_of(error)
            answer = wire.answer_bytes(request.idempotency_key, code.value[0], message)
            if code != grpc.StatusCode.INTERNAL:
                REJECTIONS.count(PLAY_METHOD, code)
            play.answered(answer, stamps=stamps)
            return
        play.answered(answer, applied=bool(outcome.envelopes), stamps=stamps)

    async def GetView(
        self, request: messages.GetViewRequest, context: grpc.aio.ServicerContext
    ) -> messages.TableView:
        _state, seat = await self._caller_seat(request.table_id)
        if seat is None:
            raise PermissionDeniedError("GetView shows a seat's view; ops use Watch for full information")
        wait_until = time.monotonic() + time_budget_seconds(context, CLAIM_WAIT_CAP_SECONDS)
        state = await self._state_after_hidden_window(request.table_id, seat, wait_until)
        return table_view_message(state, seat, await self._deadline_of(state))


def _held_update(
    events: Sequence[bytes], state: TableState, seat: int, deadline: datetime.datetime | None
) -> bytes:
    """The update of held `events` with the view of the last held `state` and its deadline."""
    return wire.update_bytes(events, wire.view_bytes(state, seat) + wire.deadline_bytes(deadline))


def _same_view(view: bytes, other: bytes) -> bool:
    """True when two serialized views (`wire.view_bytes`, without their deadline) show the same:
    the same bytes, or (never seen, but equal messages need not serialize alike) equal messages."""
    return view == other or messages.TableView.FromString(view) == messages.TableView.FromString(other)


def table_view_message(
    state: TableState, seat: int, deadline: datetime.datetime | None
) -> messages.TableView:
    """The public TableView message of the domain view of `seat` (what its streams send, parsed)."""
    return messages.TableView.FromString(wire.view_bytes(state, seat) + wire.deadline_bytes(deadline))
