"""Topic names, routing events to topics by payload, and creating topics on the real broker."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient
from mahjong.v1 import (
    envelope_pb2,
    ledger_events_pb2,
    match_events_pb2,
    settlement_events_pb2,
    table_events_pb2,
)
from mahjong_platform.envelopes import new_envelope, utc_now
from mahjong_platform.events import payloads
from mahjong_platform.topics import Topics, UnroutableEventError, ensure_topics


def test_the_default_topics_are_the_six_versioned_names() -> None:
    assert Topics().all_names() == (
        "mahjong.match.v1",
        "mahjong.table.v1",
        "mahjong.settlement.v1",
        "mahjong.ledger.v1",
        "mahjong.seats.v1",
        "mahjong.dlq.v1",
    )
    assert Topics.with_prefix("") == Topics()


def test_a_prefix_goes_in_front_of_every_name() -> None:
    topics = Topics.with_prefix("t.abc.")
    assert topics.table == "t.abc.mahjong.table.v1"
    assert topics.dead_letter == "t.abc.mahjong.dlq.v1"
    assert topics.seats == "t.abc.mahjong.seats.v1"
    assert all(name.startswith("t.abc.mahjong.") for name in topics.all_names())


@pytest.mark.parametrize(
    ("payload", "topic"),
    [
        (match_events_pb2.TableAssigned(), "mahjong.match.v1"),
        (table_events_pb2.GameEnded(), "mahjong.table.v1"),
        (settlement_events_pb2.SettlementInstructed(), "mahjong.settlement.v1"),
        (ledger_events_pb2.TransferPosted(), "mahjong.ledger.v1"),
    ],
    ids=["match", "table", "settlement", "ledger"],
)
def test_an_event_is_routed_by_its_payload_field_range(payload: object, topic: str) -> None:
    envelope = new_envelope(payload, clock=utc_now)  # type: ignore[arg-type]
    assert Topics().for_envelope(envelope) == topic


def test_every_payload_type_has_a_topic() -> None:
    for field in envelope_pb2.Envelope.DESCRIPTOR.oneofs_by_name["payload"].fields:
        envelope = envelope_pb2.Envelope()
        getattr(envelope, field.name).SetInParent()
        assert Topics().for_envelope(envelope) in Topics().all_names()[:4]


def test_a_seat_releasing_event_is_also_published_to_the_seats_topic_and_no_other_event_is() -> None:
    """The one event with two destinations: the event registry's `releases_seat` (GameEnded,
    PlayerLeft) goes to the table topic, its full record, and to the seats topic matchmaking reads."""
    topics = Topics.with_prefix("p.")
    releasing = payloads(releases_seat=True)
    assert releasing == {"game_ended", "player_left"}
    for field in envelope_pb2.Envelope.DESCRIPTOR.oneofs_by_name["payload"].fields:
        envelope = envelope_pb2.Envelope()
        getattr(envelope, field.name).SetInParent()
        expected = (
            (topics.table, topics.seats) if field.name in releasing else (topics.for_envelope(envelope),)
        )
        assert topics.destinations(envelope) == expected, field.name
        assert topics.destinations(envelope)[0] == topics.for_envelope(envelope)


def test_an_envelope_without_payload_has_no_destinations() -> None:
    with pytest.raises(UnroutableEventError, match="no payload"):
        Topics().destinations(envelope_pb2.Envelope(event_id="e"))


def test_an_envelope_without_payload_has_no_topic() -> None:
    with pytest.raises(UnroutableEventError, match="no payload"):
        Topics().for_envelope(envelope_pb2.Envelope(event_id="e"))


@pytest.mark.integration
def test_ensure_topics_creates_missing_topics_and_leaves_existing_ones(
    kafka_bootstrap_servers: str, unique_prefix: str
) -> None:
    created = ensure_topics(kafka_bootstrap_servers, ["a.v1", "b.v1"], partitions=3, prefix=unique_prefix)
    assert created == [unique_prefix + "a.v1", unique_prefix + "b.v1"]
    # Again, with one more topic and another partition count: existing topics stay as they are.
    ensure_topics(kafka_bootstrap_servers, ["a.v1", "b.v1", "c.v1"], partitions=2, prefix=unique_prefix)
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap_servers)
    try:
        described = admin.describe_topics([unique_prefix + name for name in ("a.v1", "b.v1", "c.v1")])
    finally:
        admin.close()
    partition_counts = {topic["name"][len(unique_prefix) :]: len(topic["partitions"]) for topic in described}
    assert partition_counts == {"a.v1": 3, "b.v1": 3, "c.v1": 2}


def test_topic_names_over_kafkas_limit_are_refused_before_contacting_the_broker() -> None:
    with pytest.raises(ValueError, match=r"1\.\.249 characters"):
        ensure_topics("127.0.0.1:1", ["x" * 250])
