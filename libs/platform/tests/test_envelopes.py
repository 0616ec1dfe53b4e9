"""Envelope helpers: building with an injected clock, and strict parsing of untrusted bytes."""

from __future__ import annotations

import datetime
import functools
import itertools
import os
import time
import uuid

import pytest
from google.protobuf import timestamp_pb2
from hypothesis import given
from hypothesis import strategies as st
from mahjong.v1 import envelope_pb2, ledger_events_pb2, table_events_pb2
from mahjong_platform.envelopes import (
    EVENT_IDS_PER_RANDOM_READ,
    EnvelopeDecodeError,
    _uuid7_text,
    datetime_of,
    new_envelope,
    new_envelopes,
    new_event_id,
    new_event_ids,
    parse_envelope,
    payload_type_name,
    serialize_envelope,
)

FIXED_TIME = datetime.datetime(2025, 6, 7, 8, 9, 10, 123456, tzinfo=datetime.UTC)


def fixed_clock() -> datetime.datetime:
    return FIXED_TIME


def valid_envelope() -> envelope_pb2.Envelope:
    return new_envelope(
        table_events_pb2.TileDrawn(seat=1, tile="3C"), clock=fixed_clock, stream_id="table-1", sequence=1
    )


def test_a_new_envelope_gets_a_uuid_of_its_time_and_the_clock_time() -> None:
    envelope = new_envelope(
        ledger_events_pb2.TransferPosted(),
        clock=fixed_clock,
        correlation_id="request-1",
        causation_id="cause-1",
    )
    assert uuid.UUID(envelope.event_id).version == 7
    assert milliseconds_of(envelope.event_id) == int(FIXED_TIME.timestamp() * 1000)
    assert envelope.occurred_at.ToDatetime(tzinfo=datetime.UTC) == FIXED_TIME
    assert envelope.WhichOneof("payload") == "transfer_posted"
    assert payload_type_name(envelope) == "TransferPosted"
    assert (envelope.correlation_id, envelope.causation_id) == ("request-1", "cause-1")
    assert new_envelope(ledger_events_pb2.TransferPosted(), clock=fixed_clock).event_id != envelope.event_id


def milliseconds_of(event_id: str) -> int:
    return uuid.UUID(event_id).int >> 80


def uuid7_of(milliseconds: int, random16: bytes) -> str:
    """RFC 9562's version 7 UUID of a millisecond and random bits, built with `uuid.UUID`."""
    bits = ((milliseconds & ((1 << 48) - 1)) << 80) | (int.from_bytes(random16, "big") & ((1 << 80) - 1))
    bits = (bits & ~(0xF000 << 64)) | (7 << 76)  # the version (Python 3.11's UUID knows 1-5 only)
    bits = (bits & ~(0xC000 << 48)) | (0x8000 << 48)  # the variant: 10xx
    return str(uuid.UUID(int=bits))


def test_event_ids_are_distinct_version_7_uuids_across_random_reads() -> None:
    before = time.time_ns() // 1_000_000
    ids = [new_event_id() for _ in range(3 * EVENT_IDS_PER_RANDOM_READ + 5)]
    after = time.time_ns() // 1_000_000
    assert len(set(ids)) == len(ids)
    for event_id in ids:
        parsed = uuid.UUID(event_id)
        assert (parsed.version, parsed.variant, str(parsed)) == (7, uuid.RFC_4122, event_id)
        assert before <= milliseconds_of(event_id) <= after


def test_event_ids_are_formatted_as_uuid_formats_them() -> None:
    for milliseconds in (0, 1, 1_733_300_000_123, (1 << 48) - 1, -1, -86_400_000):
        for _ in range(500):
            random16 = os.urandom(16)
            expected = uuid7_of(milliseconds, random16)
            assert _uuid7_text(f"{milliseconds & ((1 << 48) - 1):012x}", random16) == expected
            assert uuid.UUID(expected).version == 7
        for random16 in (bytes(16), b"\xff" * 16):
            assert _uuid7_text(f"{milliseconds & ((1 << 48) - 1):012x}", random16) == uuid7_of(
                milliseconds, random16
            )
    ids = new_event_ids(2 * EVENT_IDS_PER_RANDOM_READ + 3) + new_event_ids(1) + new_event_ids(0)
    assert len(set(ids)) == len(ids) == 2 * EVENT_IDS_PER_RANDOM_READ + 4
    assert all(uuid.UUID(event_id).version == 7 for event_id in ids)
    same_moment = new_event_ids(5, 1_733_300_000_123)
    assert {milliseconds_of(event_id) for event_id in same_moment} == {1_733_300_000_123}


def _the_moment(moment: datetime.datetime) -> datetime.datetime:
    return moment


def test_event_ids_carry_their_events_millisecond_so_later_events_sort_after() -> None:
    """Time-ordered ids: the event store's and the outbox's unique indexes of event ids grow at
    their end instead of at a random page per event (random version 4 ids did)."""
    moments = [FIXED_TIME + datetime.timedelta(milliseconds=step) for step in range(0, 50, 2)]
    groups = []
    for moment in moments:
        clock = functools.partial(_the_moment, moment)
        envelopes = new_envelopes([table_events_pb2.TileDrawn(seat=1, tile="3C")] * 3, clock=clock)
        envelopes.append(new_envelope(table_events_pb2.TileDrawn(), clock=clock))
        ids = [envelope.event_id for envelope in envelopes]
        assert {milliseconds_of(event_id) for event_id in ids} == {int(moment.timestamp() * 1000)}
        groups.append(ids)
    for earlier, later in itertools.pairwise(groups):
        assert max(earlier) < min(later)


@given(
    st.datetimes(
        min_value=datetime.datetime(1900, 1, 1),
        max_value=datetime.datetime(2200, 1, 1),
        timezones=st.sampled_from(
            [
                datetime.UTC,
                datetime.timezone(datetime.timedelta(hours=5, minutes=30)),
                datetime.timezone(-datetime.timedelta(hours=8)),
            ]
        ),
    )
)
def test_envelope_times_are_those_of_the_protobuf_helpers(moment: datetime.datetime) -> None:
    expected = timestamp_pb2.Timestamp()
    expected.FromDatetime(moment)
    envelope = new_envelope(table_events_pb2.TileDrawn(seat=1, tile="3C"), clock=lambda: moment)
    assert envelope.occurred_at == expected
    (batched,) = new_envelopes([table_events_pb2.TileDrawn(seat=1, tile="3C")], clock=lambda: moment)
    assert batched.occurred_at == expected
    assert datetime_of(expected) == expected.ToDatetime(tzinfo=datetime.UTC) == moment
    with_nanos = timestamp_pb2.Timestamp(seconds=expected.seconds, nanos=expected.nanos + 999)
    assert datetime_of(with_nanos) == with_nanos.ToDatetime(tzinfo=datetime.UTC)


def test_the_envelopes_of_one_decision_share_a_clock_reading_and_are_numbered_in_order() -> None:
    readings: list[datetime.datetime] = []

    def clock() -> datetime.datetime:
        readings.append(FIXED_TIME + datetime.timedelta(seconds=len(readings)))
        return readings[-1]

    payloads = [
        table_events_pb2.TileDrawn(seat=1, tile="3C"),
        table_events_pb2.TileDiscarded(seat=1, tile="4C"),
    ]
    envelopes = new_envelopes(
        payloads, clock=clock, stream_id="table-1", first_sequence=7, correlation_id="c", causation_id="d"
    )
    assert len(readings) == 1
    assert [envelope.sequence for envelope in envelopes] == [7, 8]
    assert [envelope.WhichOneof("payload") for envelope in envelopes] == ["tile_drawn", "tile_discarded"]
    assert [envelope.tile_discarded for envelope in envelopes[1:]] == [payloads[1]]
    for envelope in envelopes:
        assert envelope.occurred_at.ToDatetime(tzinfo=datetime.UTC) == FIXED_TIME
        assert (envelope.stream_id, envelope.correlation_id, envelope.causation_id) == ("table-1", "c", "d")
        assert parse_envelope(serialize_envelope(envelope)) == envelope
    assert len({envelope.event_id for envelope in envelopes}) == 2
    assert [envelope.sequence for envelope in new_envelopes(payloads, clock=clock)] == [0, 0]
    assert new_envelopes([], clock=clock) == []
    with pytest.raises(ValueError, match="timezone-aware"):
        new_envelopes(payloads, clock=lambda: datetime.datetime(2025, 1, 1))


def test_a_forked_child_never_repeats_its_parents_next_event_ids() -> None:
    new_event_id()  # the parent's buffer holds ids it has not used yet
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        os.close(reader)
        os.write(writer, " ".join(new_event_id() for _ in range(4)).encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        child_ids = pipe.read().split()
    os.waitpid(child, 0)
    parent_ids = [new_event_id() for _ in range(4)]
    assert len(child_ids) == 4 and not set(child_ids) & set(parent_ids)


def test_building_an_envelope_rejects_naive_clocks_and_non_payload_messages() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        new_envelope(table_events_pb2.TileDrawn(), clock=lambda: datetime.datetime(2025, 1, 1))
    with pytest.raises(TypeError, match="not an Envelope payload"):
        new_envelope(envelope_pb2.DeadLetter(), clock=fixed_clock)


def test_serialized_envelopes_parse_back_equal() -> None:
    envelope = valid_envelope()
    assert parse_envelope(serialize_envelope(envelope)) == envelope


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda envelope: setattr(envelope, "event_id", "not-a-uuid"), "not a UUID"),
        (lambda envelope: setattr(envelope, "stream_id", ""), "stream id"),
        (lambda envelope: setattr(envelope, "sequence", 0), "not positive"),
        (lambda envelope: envelope.ClearField("payload"), "no payload"),
    ],
    ids=["event id", "stream id", "sequence", "payload"],
)
def test_parsing_rejects_envelopes_missing_what_every_event_has(change: object, message: str) -> None:
    envelope = valid_envelope()
    change(envelope)  # type: ignore[operator]
    with pytest.raises(EnvelopeDecodeError, match=message):
        parse_envelope(envelope.SerializeToString())


def test_parsing_rejects_corrupt_bytes() -> None:
    with pytest.raises(EnvelopeDecodeError, match="not a protobuf Envelope"):
        parse_envelope(b"\xff\xfe this is not an envelope")


@given(st.binary(max_size=200))
def test_arbitrary_bytes_either_parse_into_a_complete_event_or_raise_envelope_decode_error(
    data: bytes,
) -> None:
    try:
        envelope = parse_envelope(data)
    except EnvelopeDecodeError:
        return
    assert envelope.stream_id and envelope.sequence >= 1 and envelope.WhichOneof("payload")
