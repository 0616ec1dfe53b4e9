"""Envelope helpers: building with an injected clock, and strict parsing of untrusted bytes."""

from __future__ import annotations

import datetime
import os
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mahjong.v1 import envelope_pb2, ledger_events_pb2, table_events_pb2
from mahjong_platform.envelopes import (
    EVENT_IDS_PER_RANDOM_READ,
    EnvelopeDecodeError,
    new_envelope,
    new_event_id,
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


def test_a_new_envelope_gets_a_random_uuid_and_the_clock_time() -> None:
    envelope = new_envelope(
        ledger_events_pb2.TransferPosted(),
        clock=fixed_clock,
        correlation_id="request-1",
        causation_id="cause-1",
    )
    assert uuid.UUID(envelope.event_id).version == 4
    assert envelope.occurred_at.ToDatetime(tzinfo=datetime.UTC) == FIXED_TIME
    assert envelope.WhichOneof("payload") == "transfer_posted"
    assert payload_type_name(envelope) == "TransferPosted"
    assert (envelope.correlation_id, envelope.causation_id) == ("request-1", "cause-1")
    assert new_envelope(ledger_events_pb2.TransferPosted(), clock=fixed_clock).event_id != envelope.event_id


def test_event_ids_are_distinct_version_4_uuids_across_random_reads() -> None:
    ids = [new_event_id() for _ in range(3 * EVENT_IDS_PER_RANDOM_READ + 5)]
    assert len(set(ids)) == len(ids)
    for event_id in ids:
        parsed = uuid.UUID(event_id)
        assert (parsed.version, parsed.variant, str(parsed)) == (4, uuid.RFC_4122, event_id)


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
