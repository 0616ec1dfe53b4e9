"""Building, serializing and strictly parsing event `Envelope`s.

Every event is wrapped in one protobuf `Envelope` (see protos/mahjong/v1/envelope.proto). These
helpers keep the few rules about envelopes in one place: event ids are time-ordered UUIDs
(version 7: the event's millisecond, then 74 random bits), the occurrence time comes from an
injected clock (so tests and replays control time), and parsing
rejects bytes that merely *happen* to be valid protobuf but are not a usable event: protobuf
parsing alone accepts many random byte strings, and a consumer must dead-letter those instead of
applying an empty event.
"""

from __future__ import annotations

import datetime
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence

from google.protobuf import timestamp_pb2
from google.protobuf.message import DecodeError, Message
from mahjong.v1 import envelope_pb2

Clock = Callable[[], datetime.datetime]
"""Returns the current time as a timezone-aware datetime; injected so tests control time."""

# Large enough for a whole opening event (the shuffled wall) with room to spare; an event bigger
# than this is a bug, and Kafka's default message size limit is 1 MB anyway.
ENVELOPE_MAX_BYTES = 512 * 1024
STREAM_ID_MAX_LENGTH = 200


class EnvelopeDecodeError(ValueError):
    """Bytes that are not a well-formed event envelope."""


def utc_now() -> datetime.datetime:
    """The system clock in UTC: the production `Clock`."""
    return datetime.datetime.now(datetime.UTC)


EVENT_IDS_PER_RANDOM_READ = 256


class _RandomBytes:
    """`os.urandom` read EVENT_IDS_PER_RANDOM_READ ids at a time: the same random source as
    `uuid.uuid4`, one system call per 256 ids instead of one per id (a call releases the GIL, and
    a busy event loop made the group commit's writer wait for it back once per event). A forked
    child starts with a fresh buffer, so it never repeats its parent's ids."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buffer = b""
        self._offset = 0
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._buffer = b""
        self._offset = 0

    def take16(self) -> bytes:
        return self.take(1)[0]

    def take(self, count: int) -> list[bytes]:
        """`count` fresh 16-byte strings (read from the buffer, refilled as it runs out)."""
        taken: list[bytes] = []
        with self._lock:
            while len(taken) < count:
                if self._offset >= len(self._buffer):
                    self._buffer = os.urandom(16 * EVENT_IDS_PER_RANDOM_READ)
                    self._offset = 0
                buffer, offset = self._buffer, self._offset
                end = min(len(buffer), offset + 16 * (count - len(taken)))
                taken += [buffer[start : start + 16] for start in range(offset, end, 16)]
                self._offset = end
        return taken


_RANDOM_BYTES = _RandomBytes()
_VARIANT_DIGITS = "89ab89ab89ab89ab"  # RFC 4122's variant bits (10xx) over the digit's low two bits
_MILLISECONDS_MASK = (1 << 48) - 1


def _uuid7_text(milliseconds_hex: str, random16: bytes) -> str:
    """A version 7 UUID (RFC 9562) in canonical text: `milliseconds_hex` (12 hex digits, the Unix
    time in milliseconds) first, then 74 of `random16`'s bits with the version and variant."""
    digits = random16.hex()
    variant = _VARIANT_DIGITS[int(digits[16], 16)]
    moment = f"{milliseconds_hex[:8]}-{milliseconds_hex[8:]}"
    return f"{moment}-7{digits[13:16]}-{variant}{digits[17:20]}-{digits[20:]}"


def _milliseconds_hex(milliseconds: int | None) -> str:
    if milliseconds is None:
        milliseconds = time.time_ns() // 1_000_000
    return f"{milliseconds & _MILLISECONDS_MASK:012x}"


def new_event_id(milliseconds: int | None = None) -> str:
    """A fresh event id: a UUID 7 of `milliseconds` (Unix time; None: now) and 74 random bits.

    Time-ordered ids, where random (version 4) ones were: each event id is a key of the event
    store's unique index and of the outbox's, and a random key lands on a random page of them, so
    a group commit of a few events wrote a page of each index per event (a commit writes every
    page it changed to the write-ahead log, and later to the database); ids of the same moment
    share the last pages. The time is the event's own (`occurred_at`, which its envelope carries
    anyway), so the id tells a reader nothing more."""
    return _uuid7_text(_milliseconds_hex(milliseconds), _RANDOM_BYTES.take16())


def new_event_ids(count: int, milliseconds: int | None = None) -> list[str]:
    """`count` fresh event ids of one moment (`new_event_id`), taking the random bytes once."""
    milliseconds_hex = _milliseconds_hex(milliseconds)
    return [_uuid7_text(milliseconds_hex, random16) for random16 in _RANDOM_BYTES.take(count)]


def _milliseconds_of(timestamp: timestamp_pb2.Timestamp) -> int:
    return timestamp.seconds * 1000 + timestamp.nanos // 1_000_000


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def timestamp_of(moment: datetime.datetime) -> timestamp_pb2.Timestamp:
    """The `Timestamp` of a timezone-aware datetime, as `Timestamp.FromDatetime` sets it (that
    helper is pure Python and about 20 times slower: it goes through a UTC time tuple)."""
    if moment.tzinfo is None:
        raise ValueError("the clock must return timezone-aware datetimes")
    delta = moment - _EPOCH
    return timestamp_pb2.Timestamp(
        seconds=delta.days * 86_400 + delta.seconds, nanos=delta.microseconds * 1000
    )


def as_utc(moment: datetime.datetime) -> datetime.datetime:
    """`moment`, a naive one taken as UTC: SQLite hands back naive datetimes for timezone-aware
    columns, and everything stored is UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.UTC)


def datetime_of(timestamp: timestamp_pb2.Timestamp) -> datetime.datetime:
    """`timestamp.ToDatetime(tzinfo=datetime.UTC)` without the slow helper (microseconds, the
    nanoseconds below them dropped, as it does)."""
    return _EPOCH + datetime.timedelta(seconds=timestamp.seconds, microseconds=timestamp.nanos // 1000)


def new_envelope(
    payload: Message,
    *,
    clock: Clock,
    stream_id: str = "",
    sequence: int = 0,
    correlation_id: str = "",
    causation_id: str = "",
    event_id: str | None = None,
) -> envelope_pb2.Envelope:
    """Wrap one event payload (e.g. a `TableOpened`) in a new envelope.

    The payload is placed in the `payload` oneof field whose message type matches it. Stream id
    and sequence may stay empty: the event store fills them when it appends the event.
    """
    occurred_at = clock()
    if occurred_at.tzinfo is None:
        raise ValueError("the clock must return timezone-aware datetimes")
    timestamp = timestamp_of(occurred_at)
    envelope = envelope_pb2.Envelope(
        event_id=event_id if event_id is not None else new_event_id(_milliseconds_of(timestamp)),
        stream_id=stream_id,
        sequence=sequence,
        correlation_id=correlation_id,
        causation_id=causation_id,
    )
    envelope.occurred_at.CopyFrom(timestamp)
    payload_field = _payload_field_for(payload)
    getattr(envelope, payload_field).CopyFrom(payload)
    return envelope


def new_envelopes(
    payloads: Sequence[Message],
    *,
    clock: Clock,
    stream_id: str = "",
    first_sequence: int = 0,
    correlation_id: str = "",
    causation_id: str = "",
) -> list[envelope_pb2.Envelope]:
    """`new_envelope` for the events of one decision: one reading of the clock for all of them
    (they occur together, and their ids carry its millisecond), their ids drawn at once;
    numbered from `first_sequence` (0: left unnumbered, for the event store to number)."""
    if not payloads:
        return []
    occurred_at = timestamp_of(clock())
    envelopes = []
    event_ids = new_event_ids(len(payloads), _milliseconds_of(occurred_at))
    for index, (payload, event_id) in enumerate(zip(payloads, event_ids, strict=True)):
        envelope = envelope_pb2.Envelope(
            event_id=event_id,
            stream_id=stream_id,
            sequence=first_sequence + index if first_sequence else 0,
            correlation_id=correlation_id,
            causation_id=causation_id,
            occurred_at=occurred_at,
        )
        getattr(envelope, _payload_field_for(payload)).CopyFrom(payload)
        envelopes.append(envelope)
    return envelopes


def payload_type_name(envelope: envelope_pb2.Envelope) -> str:
    """The payload's message name, e.g. "TableOpened"; "" when the envelope has no payload."""
    payload_field = envelope.WhichOneof("payload")
    if payload_field is None:
        return ""
    payload: Message = getattr(envelope, payload_field)
    return payload.DESCRIPTOR.name


def serialize_envelope(envelope: envelope_pb2.Envelope) -> bytes:
    """The envelope's wire bytes: what the event store keeps and what Kafka carries."""
    data = envelope.SerializeToString(deterministic=True)
    if len(data) > ENVELOPE_MAX_BYTES:
        raise ValueError(f"event {envelope.event_id} is {len(data)} bytes, over {ENVELOPE_MAX_BYTES}")
    return data


def parse_envelope(data: bytes) -> envelope_pb2.Envelope:
    """Parse and validate envelope bytes; raise `EnvelopeDecodeError` when they are not an event.

    Valid means: protobuf parses, the event id is a UUID, the stream id is set, the sequence is
    positive, and a payload is present.
    """
    if len(data) > ENVELOPE_MAX_BYTES:
        raise EnvelopeDecodeError(f"envelope is {len(data)} bytes, over {ENVELOPE_MAX_BYTES}")
    envelope = envelope_pb2.Envelope()
    try:
        envelope.ParseFromString(data)
    except DecodeError as error:
        raise EnvelopeDecodeError(f"not a protobuf Envelope: {error}") from error
    try:
        uuid.UUID(envelope.event_id)
    except ValueError as error:
        raise EnvelopeDecodeError(f"event id {envelope.event_id[:64]!r} is not a UUID") from error
    if not 0 < len(envelope.stream_id) <= STREAM_ID_MAX_LENGTH:
        raise EnvelopeDecodeError(f"stream id must be 1..{STREAM_ID_MAX_LENGTH} characters")
    if envelope.sequence < 1:
        raise EnvelopeDecodeError(f"sequence {envelope.sequence} is not positive")
    if envelope.WhichOneof("payload") is None:
        raise EnvelopeDecodeError(f"event {envelope.event_id} has no payload")
    return envelope


_PAYLOAD_FIELDS: dict[object, str] = {
    field.message_type: field.name
    for field in reversed(envelope_pb2.Envelope.DESCRIPTOR.oneofs_by_name["payload"].fields)
}
"""The (first) payload field of each payload message type: looked up per event, where a scan of
the oneof's fields was."""


def _payload_field_for(payload: Message) -> str:
    field_name = _PAYLOAD_FIELDS.get(payload.DESCRIPTOR)
    if field_name is None:
        raise TypeError(f"{payload.DESCRIPTOR.full_name} is not an Envelope payload type")
    return field_name
