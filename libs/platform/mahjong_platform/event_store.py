"""The SQL event store: append-only streams of event envelopes with optimistic concurrency.

A stream (one table, ticket or account) is the ordered list of its events, numbered 1, 2, 3, ...
A writer loads the stream, decides new events, and appends them saying which version it decided
on (`expected_version` = the last sequence it saw, 0 for a new stream). If another writer got
there first the append fails with `WrongExpectedVersionError` and writes nothing: a concurrent
write loses with a conflict, never a fork. The caller may reload and retry (gRPC `ABORTED`).

Appends run in the caller's transaction and write each event's outbox message in that same
transaction, so an event is stored if and only if it will be published.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import sqlalchemy
from mahjong.v1 import envelope_pb2
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from mahjong_platform.database import (
    PerDialect,
    insert_rows,
    one_of,
    padded_by_repeating,
    padded_chunks,
    sqlite_rows,
)
from mahjong_platform.envelopes import (
    Clock,
    datetime_of,
    parse_envelope,
    payload_type_name,
    serialize_envelope,
    utc_now,
)
from mahjong_platform.metrics import count_events_appended
from mahjong_platform.outbox import add_outbox_messages
from mahjong_platform.schema import STREAM_ID_MAX_LENGTH, stored_events
from mahjong_platform.topics import Topics

APPEND_EVENTS_MAX = 1_000
LOAD_EVENTS_MAX = 100_000


SqlCondition = tuple[str, tuple[Any, ...]]
"""A boolean SQL expression (SQLite text with ``?`` parameters) and its parameters."""


class ConditionUnmetError(Exception):
    """`EventStore.append_batch`'s further condition was false: nothing was appended."""


class WrongExpectedVersionError(Exception):
    """An append's expected version is not the stream's version: someone else appended first."""

    def __init__(self, stream_id: str, expected_version: int, actual_version: int) -> None:
        super().__init__(
            f"stream {stream_id!r} is at version {actual_version}, the append expected {expected_version}"
        )
        self.stream_id = stream_id
        self.expected_version = expected_version
        self.actual_version = actual_version


@dataclasses.dataclass(frozen=True, slots=True)
class EventStore:
    """Appends and loads event streams through the caller's SQLAlchemy session.

    Stateless apart from configuration, so one instance serves every request. `topics` decides
    which Kafka topics each appended event's outbox messages go to (by payload type: one message
    per topic, `Topics.destinations`).
    """

    topics: Topics = dataclasses.field(default_factory=Topics)
    clock: Clock = utc_now

    def append(
        self,
        session: Session,
        stream_id: str,
        expected_version: int,
        events: Sequence[envelope_pb2.Envelope],
    ) -> int:
        """Append `events` to the stream after `expected_version`; return the new last sequence.

        Each envelope gets the stream id and the next sequence number (an envelope that already
        names a different stream or sequence is a caller bug: `ValueError`). Events and their
        outbox messages are written in the caller's transaction; on a conflict nothing is written
        and `WrongExpectedVersionError` is raised. The conflict is caught both ways: by comparing
        with the stream's current version, and, for a writer that raced past that check, by the
        unique (stream_id, sequence) key.
        """
        _check_stream_id(stream_id)
        if expected_version < 0:
            raise ValueError(f"expected version {expected_version} is negative")
        if not 1 <= len(events) <= APPEND_EVENTS_MAX:
            raise ValueError(f"append takes 1..{APPEND_EVENTS_MAX} events, got {len(events)}")
        actual_version = self.stream_version(session, stream_id)
        if actual_version != expected_version:
            raise WrongExpectedVersionError(stream_id, expected_version, actual_version)
        numbered_events = [
            _numbered(event, stream_id, expected_version + index)
            for index, event in enumerate(events, start=1)
        ]
        try:
            # A savepoint, so a lost race leaves the caller's transaction usable (PostgreSQL
            # aborts the whole transaction on an error otherwise).
            with session.begin_nested():
                self._insert(session, numbered_events)
        except IntegrityError:
            actual_version = self.stream_version(session, stream_id)
            if actual_version != expected_version:
                raise WrongExpectedVersionError(stream_id, expected_version, actual_version) from None
            raise  # Not a version conflict: e.g. an event id appended before.
        return expected_version + len(numbered_events)

    def append_batch(
        self,
        session: Session,
        appends: Sequence[tuple[str, int, Sequence[envelope_pb2.Envelope]]],
        *,
        savepoint: bool = True,
        sqlite_condition: SqlCondition | None = None,
        versions_checked: bool = False,
    ) -> None:
        """`append` for many streams at once: (stream id, expected version, events) each.

        One query reads every stream's version and one statement inserts every event (and one
        its outbox messages), so a projection or a group commit that writes to many streams pays
        per batch, not per stream. All or nothing: a conflict on any stream writes nothing and
        raises `WrongExpectedVersionError` naming it. A stream appears at most once.

        `savepoint=False`, for a caller that rolls its whole transaction back on any error (a
        group commit, which then runs each command alone): the inserts run without a savepoint
        (two statements fewer), so after an error the transaction holds what the inserts wrote
        before it and must not commit; a writer that raced past the version check fails on the
        unique (stream id, sequence) key as an `IntegrityError`, not named.

        `sqlite_condition` (SQLite only; the caller checks its own conditions on PostgreSQL): a
        further condition of the caller's (the table engine's ownership fence), checked in the
        same statement as the versions, so in the same transaction with no statement of its own
        (each statement is a GIL release and re-acquire in the driver); when it is false nothing is
        written and `ConditionUnmetError` is raised (before any version conflict is named).

        `versions_checked` (SQLite only): the caller found every stream at its expected version in
        this same write transaction (`versions_differing_sqlite`, in a statement it had to run
        anyway), so nothing is asked here; the unique (stream id, sequence) key stays the last guard.
        """
        if appends:
            _check_appends(appends)
            sqlite = session.get_bind().dialect.name == "sqlite"
            assert sqlite or sqlite_condition is None, "a further condition is for SQLite only"
            assert sqlite or not versions_checked, "a version check of the caller's is for SQLite only"
            if versions_checked:
                assert sqlite_condition is None, "the caller checks its own conditions with the versions"
                versions = {stream_id: expected for stream_id, expected, _ in appends}
            elif sqlite and _at_expected_versions_sqlite(session, appends, sqlite_condition):
                versions = {stream_id: expected for stream_id, expected, _ in appends}
            else:  # PostgreSQL (one round trip however many rows), or a conflict to name
                versions = self.stream_versions(session, [stream for stream, _, _ in appends])
            self._append_at(session, appends, versions, savepoint=savepoint)

    def append_after_current(
        self,
        session: Session,
        streams: Sequence[tuple[str, Sequence[envelope_pb2.Envelope]]],
        *,
        savepoint: bool = True,
    ) -> None:
        """Append each stream's events after its current version: `append_batch` for a writer
        that decides from its own state, not from the stream (a projection's output streams), so
        the versions are read once, here, instead of by the caller and again by the append. A
        writer that appends to one of the streams between that read and the insert still fails
        it on the unique (stream id, sequence) key.

        `savepoint` as in `append_batch`: with it (the default) such a race is raised as
        `WrongExpectedVersionError` and leaves the caller's transaction usable; `savepoint=False`,
        for a caller that rolls its whole transaction back on any error (a consumer's batch, a
        ledger write), saves the SAVEPOINT and its RELEASE, and the race is an `IntegrityError`.
        On SQLite the versions are read on the driver's cursor (`stream_versions`)."""
        if streams:
            versions = self.stream_versions(session, [stream_id for stream_id, _ in streams])
            appends = [(stream_id, versions[stream_id], events) for stream_id, events in streams]
            _check_appends(appends)
            self._append_at(session, appends, versions, savepoint=savepoint)

    def _append_at(
        self,
        session: Session,
        appends: Sequence[tuple[str, int, Sequence[envelope_pb2.Envelope]]],
        actual_versions: dict[str, int],
        *,
        savepoint: bool = True,
    ) -> None:
        """Insert the appends' events if every stream is at its expected version (see `append_batch`)."""
        stream_ids = [stream_id for stream_id, _, _ in appends]
        for stream_id, expected_version, _ in appends:
            if actual_versions[stream_id] != expected_version:
                raise WrongExpectedVersionError(stream_id, expected_version, actual_versions[stream_id])
        numbered_events = [
            _numbered(event, stream_id, expected_version + index)
            for stream_id, expected_version, events in appends
            for index, event in enumerate(events, start=1)
        ]
        if not savepoint:
            self._insert(session, numbered_events)
            return
        try:
            with session.begin_nested():
                self._insert(session, numbered_events)
        except IntegrityError:
            actual_versions = self.stream_versions(session, stream_ids)
            for stream_id, expected_version, _ in appends:
                if actual_versions[stream_id] != expected_version:
                    raise WrongExpectedVersionError(
                        stream_id, expected_version, actual_versions[stream_id]
                    ) from None
            raise

    def stream_versions(self, session: Session, stream_ids: Sequence[str]) -> dict[str, int]:
        """Each stream's last sequence number (0 for a stream with no events), in one query (on
        SQLite on the driver's cursor, `sqlite_rows`: SQLAlchemy's execution of it cost several
        times the statement)."""
        versions = dict.fromkeys(stream_ids, 0)
        if versions:
            streams = sorted(versions)
            if session.get_bind().dialect.name == "sqlite":
                text = _stream_versions_text(len(streams))
                for stream_id, version in sqlite_rows(session, text, tuple(streams)):
                    versions[stream_id] = int(version)
            else:
                for row in session.execute(_STREAM_VERSIONS(session), {"stream_ids": streams}):
                    versions[row.stream_id] = int(row.version)
        return versions

    def load(
        self,
        session: Session,
        stream_id: str,
        after_sequence: int = 0,
        *,
        limit: int = LOAD_EVENTS_MAX,
    ) -> list[envelope_pb2.Envelope]:
        """The stream's events with sequence > `after_sequence`, in order, at most `limit` of them.

        An unknown stream loads as an empty list (version 0).
        """
        _check_stream_id(stream_id)
        assert after_sequence >= 0, after_sequence
        assert 1 <= limit <= LOAD_EVENTS_MAX, limit
        envelopes = []
        expected_sequence = after_sequence + 1
        parameters = {"stream_id": stream_id, "after_sequence": after_sequence, "limit": limit}
        for row in session.execute(_LOAD_EVENTS, parameters):
            # Gapless numbering is an invariant of append; a gap means the table was tampered with.
            assert row.sequence == expected_sequence, (stream_id, row.sequence, expected_sequence)
            envelopes.append(parse_envelope(bytes(row.envelope)))
            expected_sequence += 1
        return envelopes

    def stream_version(self, session: Session, stream_id: str) -> int:
        """The stream's last sequence number; 0 for a stream with no events."""
        version = session.execute(_STREAM_VERSION, {"stream_id": stream_id}).scalar_one()
        return 0 if version is None else int(version)

    def _insert(self, session: Session, events: Sequence[envelope_pb2.Envelope]) -> None:
        recorded_at = self.clock()
        event_rows = []
        outbox_rows: list[dict[str, object]] = []
        # The events of one decision share their time: each distinct one made a datetime once.
        last_time: tuple[int, int] | None = None
        occurred_at = recorded_at
        for event in events:
            # Its own topic first; a seat-releasing event is also copied to the seats topic (the
            # same bytes, so the same event id): one outbox message per topic, same transaction.
            topics = self.topics.destinations(event)
            value = serialize_envelope(event)
            timestamp = event.occurred_at
            if (timestamp.seconds, timestamp.nanos) != last_time:
                last_time = (timestamp.seconds, timestamp.nanos)
                occurred_at = datetime_of(timestamp)
            event_rows.append(
                {
                    "stream_id": event.stream_id,
                    "sequence": event.sequence,
                    "event_id": event.event_id,
                    "event_type": payload_type_name(event),
                    "topic": topics[0],
                    "occurred_at": occurred_at,
                    "recorded_at": recorded_at,
                    "envelope": value,
                }
            )
            for topic in topics:
                outbox_rows.append(
                    {
                        "topic": topic,
                        "message_key": event.stream_id,
                        "message_value": value,
                        "event_id": event.event_id,
                        "created_at": recorded_at,
                    }
                )
        # Outbox rows first is fine: the transaction makes both visible together or not at all.
        add_outbox_messages(session, outbox_rows)
        insert_rows(session, stored_events, event_rows)
        count_events_appended(session, events, [str(row["event_type"]) for row in event_rows])


_LOAD_EVENTS = (
    sqlalchemy.select(stored_events.c.sequence, stored_events.c.envelope)
    .where(stored_events.c.stream_id == sqlalchemy.bindparam("stream_id"))
    .where(stored_events.c.sequence > sqlalchemy.bindparam("after_sequence"))
    .order_by(stored_events.c.sequence)
    .limit(sqlalchemy.bindparam("limit"))
)
_STREAM_VERSION = sqlalchemy.select(sqlalchemy.func.max(stored_events.c.sequence)).where(
    stored_events.c.stream_id == sqlalchemy.bindparam("stream_id")
)
_STREAM_VERSIONS = PerDialect(
    lambda dialect_name: sqlalchemy.select(
        stored_events.c.stream_id, sqlalchemy.func.max(stored_events.c.sequence).label("version")
    )
    .where(one_of(stored_events.c.stream_id, "stream_ids", dialect_name))
    .group_by(stored_events.c.stream_id)
)
"""Statements built once: building and caching a statement costs more than running it on SQLite."""


_VERSIONS_CHECKED_PER_QUERY_MAX = 256


@functools.lru_cache(maxsize=256)
def _stream_versions_text(count: int) -> str:
    """SQLite: `_STREAM_VERSIONS` as text for `count` stream ids (on the primary key)."""
    marks = ", ".join("?" * count)
    return (
        f"SELECT stream_id, max(sequence) FROM stored_events WHERE stream_id IN ({marks}) GROUP BY stream_id"
    )


def _at_expected_versions_sqlite(
    session: Session,
    appends: Sequence[tuple[str, int, Sequence[envelope_pb2.Envelope]]],
    condition: SqlCondition | None = None,
) -> bool:
    """SQLite: whether every stream is at its expected version, asked in one single-row query
    (per 256 streams) instead of one row per stream: the driver releases the GIL at every row
    it steps, and a busy event loop may keep it a while. `condition`: asked in the first of them
    (`ConditionUnmetError` when false)."""
    for chunk, size in padded_chunks(appends, _VERSIONS_CHECKED_PER_QUERY_MAX):
        padded = padded_by_repeating(chunk, size)
        values = tuple(value for stream_id, expected, _ in padded for value in (stream_id, expected))
        if condition is None:
            ((differing,),) = sqlite_rows(session, f"SELECT {_versions_differing_text(size)}", values)
        else:
            text, parameters = condition
            ((differing, met),) = sqlite_rows(
                session, f"SELECT {_versions_differing_text(size)}, {text}", values + tuple(parameters)
            )
            if not met:
                raise ConditionUnmetError
            condition = None
        if differing:
            return False
    return True


def versions_differing_sqlite(streams: Sequence[tuple[str, int]], size: int) -> SqlCondition:
    """SQLite: an integer expression, how many of `streams` ((stream id, expected version) each,
    repeated from the first up to `size`, a power of two: few statement texts) differ from their
    stream's version (0 for a stream with no events); zero when every stream is where its writer
    expects it. For a caller that asks it in a statement of its own (the table engine's group
    commit asks it with the batch's stored answers) and then appends with `versions_checked`."""
    values = tuple(
        value for stream_id, expected in padded_by_repeating(streams, size) for value in (stream_id, expected)
    )
    return _versions_differing_text(size), values


@functools.cache
def _versions_differing_text(count: int) -> str:
    """How many (stream id, expected version) pairs differ from their stream's version, as a
    scalar subquery (a caller's SELECT may add columns after it)."""
    expected = ", ".join(["(?, ?)"] * count)
    return (
        f"(SELECT count(*) FROM (VALUES {expected}) AS expected WHERE coalesce((SELECT max(sequence) "
        "FROM stored_events WHERE stored_events.stream_id = expected.column1), 0) != expected.column2)"
    )


def _check_appends(appends: Sequence[tuple[str, int, Sequence[envelope_pb2.Envelope]]]) -> None:
    stream_ids = [stream_id for stream_id, _, _ in appends]
    if len(set(stream_ids)) != len(stream_ids):
        raise ValueError("a stream appears twice in one batch of appends")
    for stream_id, expected_version, events in appends:
        _check_stream_id(stream_id)
        if expected_version < 0:
            raise ValueError(f"expected version {expected_version} is negative")
        if not 1 <= len(events) <= APPEND_EVENTS_MAX:
            raise ValueError(f"append takes 1..{APPEND_EVENTS_MAX} events, got {len(events)}")


def _check_stream_id(stream_id: str) -> None:
    if not 0 < len(stream_id) <= STREAM_ID_MAX_LENGTH:
        raise ValueError(f"stream id must be 1..{STREAM_ID_MAX_LENGTH} characters, got {stream_id!r}")


def _numbered(event: envelope_pb2.Envelope, stream_id: str, sequence: int) -> envelope_pb2.Envelope:
    if event.stream_id not in ("", stream_id):
        raise ValueError(
            f"event {event.event_id} names stream {event.stream_id!r}, appended to {stream_id!r}"
        )
    if event.sequence not in (0, sequence):
        raise ValueError(f"event {event.event_id} has sequence {event.sequence}, its position is {sequence}")
    if event.stream_id and event.sequence:
        return event  # numbered already (a table engine's): nothing to change, nothing to copy
    numbered = envelope_pb2.Envelope()
    numbered.CopyFrom(event)
    numbered.stream_id = stream_id
    numbered.sequence = sequence
    return numbered
