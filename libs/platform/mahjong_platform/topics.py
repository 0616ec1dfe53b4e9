"""Kafka topic names and their creation.

Every event travels on one of five versioned topics, chosen by its payload's field number (the
ranges of `envelope.proto`); a seat-releasing table event (`releases_seat` in the event registry:
GameEnded, PlayerLeft) is also written, as the same envelope with the same event id, to the small
topic `mahjong.seats.v1`, so matchmaking frees seats without reading every event of every game.
The whole platform takes topic names from a `Topics` value instead of the bare constants, so tests
can give each test its own prefixed set of topics on one shared broker, and a deployment could
namespace its topics the same way.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Iterable

from kafka import KafkaAdminClient
from kafka.errors import KafkaError, TopicAlreadyExistsError, for_code
from mahjong.v1 import envelope_pb2

from mahjong_platform.events import payloads

logger = logging.getLogger(__name__)

MATCH_TOPIC = "mahjong.match.v1"
TABLE_TOPIC = "mahjong.table.v1"
SETTLEMENT_TOPIC = "mahjong.settlement.v1"
LEDGER_TOPIC = "mahjong.ledger.v1"
SEATS_TOPIC = "mahjong.seats.v1"
"""Copies of the table events that free seats; `mahjong.table.v1` still carries them too (the
table topic stays every game's full record)."""
DEAD_LETTER_TOPIC = "mahjong.dlq.v1"

DEFAULT_PARTITION_COUNT = 6
DEFAULT_REPLICATION_FACTOR = 1
# Kafka's own limit on a topic name's length.
TOPIC_NAME_MAX_LENGTH = 249
TOPIC_CREATION_TIMEOUT_MS = 30_000
PARTITION_COUNT_MAX = 1_000

# The Envelope `payload` oneof reserves field number ranges per topic (see envelope.proto):
# an event's topic follows from which range its payload field number falls in.
_PAYLOAD_FIELD_NUMBER_RANGES: tuple[tuple[range, str], ...] = (
    (range(10, 30), "match"),
    (range(30, 80), "table"),
    (range(80, 100), "settlement"),
    (range(100, 120), "ledger"),
)
_ALSO_ON_SEATS_TOPIC = payloads(releases_seat=True)
"""The payloads written to the seats topic as well as to their own (the event registry's
`releases_seat`: exactly the events matchmaking frees seats on)."""


class UnroutableEventError(ValueError):
    """An envelope's payload has no topic: it is empty or outside every reserved field range."""


@dataclasses.dataclass(frozen=True, slots=True)
class Topics:
    """The six topic names the platform uses, all sharing one optional prefix."""

    match: str = MATCH_TOPIC
    table: str = TABLE_TOPIC
    settlement: str = SETTLEMENT_TOPIC
    ledger: str = LEDGER_TOPIC
    dead_letter: str = DEAD_LETTER_TOPIC
    seats: str = SEATS_TOPIC

    @classmethod
    def with_prefix(cls, prefix: str) -> Topics:
        """The standard topics with `prefix` in front of each name (empty prefix: the real names)."""
        return cls(
            match=prefix + MATCH_TOPIC,
            table=prefix + TABLE_TOPIC,
            settlement=prefix + SETTLEMENT_TOPIC,
            ledger=prefix + LEDGER_TOPIC,
            dead_letter=prefix + DEAD_LETTER_TOPIC,
            seats=prefix + SEATS_TOPIC,
        )

    def all_names(self) -> tuple[str, ...]:
        """Every topic name, the dead letter topic last."""
        return (self.match, self.table, self.settlement, self.ledger, self.seats, self.dead_letter)

    def for_envelope(self, envelope: envelope_pb2.Envelope) -> str:
        """The topic an event belongs on, decided by its payload's field number range (the one its
        event store row names: the full record of its stream)."""
        return self.destinations(envelope)[0]

    def destinations(self, envelope: envelope_pb2.Envelope) -> tuple[str, ...]:
        """Every topic the event is published to: `for_envelope`'s first, then the seats topic for
        a seat-releasing event. The event store writes one outbox message per destination, in the
        event's transaction."""
        payload_name = envelope.WhichOneof("payload")
        if payload_name is None:
            raise UnroutableEventError(f"event {envelope.event_id!r} has no payload")
        return tuple(getattr(self, attribute) for attribute in _destination_attributes(payload_name))


@functools.cache
def _destination_attributes(payload_name: str) -> tuple[str, ...]:
    field_number = envelope_pb2.Envelope.DESCRIPTOR.fields_by_name[payload_name].number
    for field_numbers, attribute in _PAYLOAD_FIELD_NUMBER_RANGES:
        if field_number in field_numbers:
            return (attribute, "seats") if payload_name in _ALSO_ON_SEATS_TOPIC else (attribute,)
    raise UnroutableEventError(
        f"payload {payload_name} (field {field_number}) is outside every topic's field range"
    )


def ensure_topics(
    bootstrap_servers: str | list[str],
    names: Iterable[str] = Topics().all_names(),
    *,
    partitions: int = DEFAULT_PARTITION_COUNT,
    replication_factor: int = DEFAULT_REPLICATION_FACTOR,
    prefix: str = "",
    timeout_ms: int = TOPIC_CREATION_TIMEOUT_MS,
) -> list[str]:
    """Create the topics that do not exist yet and wait until every one has a leader.

    Idempotent: an existing topic is left as it is (its partition count is not changed). Returns
    the full names (with `prefix`) so callers can log or subscribe to exactly what was ensured.
    """
    full_names = [prefix + name for name in names]
    assert full_names, "ensure_topics needs at least one topic name"
    assert 1 <= partitions <= PARTITION_COUNT_MAX, partitions
    assert replication_factor >= 1, replication_factor
    for name in full_names:
        if not 0 < len(name) <= TOPIC_NAME_MAX_LENGTH:
            raise ValueError(f"topic name {name!r} must be 1..{TOPIC_NAME_MAX_LENGTH} characters")
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap_servers,
        request_timeout_ms=timeout_ms,
        bootstrap_timeout_ms=timeout_ms,
    )
    try:
        response = admin.create_topics(
            {
                name: {"num_partitions": partitions, "replication_factor": replication_factor}
                for name in full_names
            },
            timeout_ms=timeout_ms,
            raise_errors=False,
        )
        for topic in response["topics"]:
            error_type = for_code(topic["error_code"])
            if topic["error_code"] == 0 or error_type is TopicAlreadyExistsError:
                continue
            raise KafkaError(f"creating topic {topic['name']!r} failed: {error_type.__name__}")
        admin.wait_for_topics(full_names, timeout_ms=timeout_ms)
    finally:
        admin.close()
    logger.info("topics ready", extra={"topics": full_names, "partitions": partitions})
    return full_names
