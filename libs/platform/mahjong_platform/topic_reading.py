"""Reading topics from Kafka without a consumer group: a snapshot of partitions up to their end
offsets of now (or a window of Kafka record times). Nothing is committed; a live consumer group is
not disturbed. Used by rebuilds (`mahjong_platform.rebuild`) and by `mjctl replay`.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator, Sequence
from typing import Any, Final

from kafka import KafkaConsumer, TopicPartition

TOPIC_METADATA_TIMEOUT_SECONDS: Final = 30.0
READ_TIMEOUT_SECONDS: Final = 120.0


def reading_consumer(
    bootstrap_servers: str | Sequence[str],
    *,
    bootstrap_timeout_seconds: float = TOPIC_METADATA_TIMEOUT_SECONDS,
) -> KafkaConsumer:
    """A consumer of no group that commits nothing (every reader of this module's kind), giving up
    on a broker that does not answer after `bootstrap_timeout_seconds` (kafka-python's
    `KafkaTimeoutError`; its own default is the same 30 s). `bootstrap_servers` as kafka-python
    takes them: a list, or one text ("host:port", comma-separated for several)."""
    return KafkaConsumer(
        bootstrap_servers=bootstrap_servers
        if isinstance(bootstrap_servers, str)
        else list(bootstrap_servers),
        group_id=None,
        enable_auto_commit=False,
        bootstrap_timeout_ms=max(1, int(bootstrap_timeout_seconds * 1000)),
    )


class TopicReadError(Exception):
    """The topics cannot be read (unknown topic, broker unreachable, too many records, too slow)."""


def topic_partitions(consumer: KafkaConsumer, topic: str) -> set[int]:
    """The topic's partition numbers, waiting for the client's metadata; TopicReadError if unknown."""
    deadline = time.monotonic() + TOPIC_METADATA_TIMEOUT_SECONDS
    while True:
        partitions = consumer.partitions_for_topic(topic)
        if partitions:
            return set(partitions)
        if time.monotonic() > deadline:
            raise TopicReadError(f"topic {topic!r} has no partitions (is the broker up, the prefix right?)")
        time.sleep(0.1)


Window = tuple[datetime.datetime | None, datetime.datetime | None]
"""Kafka record times to read between: (from, until); None: the beginning / the end now."""


def read_partitions_to_end(
    consumer: KafkaConsumer,
    partitions: Sequence[TopicPartition],
    records_max: int,
    window: Window = (None, None),
    *,
    end_offsets: dict[TopicPartition, int] | None = None,
) -> Iterator[Any]:
    """Every record of the partitions, from the beginning to the end offsets of now (a snapshot),
    or between the offsets Kafka's time index gives for the window's times. ``end_offsets``: the
    snapshot's ends, when the caller read them (and needs the same ones); None: read here."""
    consumer.assign(list(partitions))
    since, until = window
    if end_offsets is None:
        end_offsets = consumer.end_offsets(list(partitions))
    if since is None:
        consumer.seek_to_beginning(*partitions)
    else:
        for partition, offset in _offsets_at(consumer, partitions, since, end_offsets).items():
            consumer.seek(partition, offset)
    if until is not None:
        end_offsets = _offsets_at(consumer, partitions, until, end_offsets)
    pending = {partition for partition in partitions if end_offsets[partition] > consumer.position(partition)}
    read_count = 0
    deadline = time.monotonic() + READ_TIMEOUT_SECONDS
    while pending:
        if time.monotonic() > deadline:
            raise TopicReadError(
                f"reading {len(partitions)} partitions did not finish in {READ_TIMEOUT_SECONDS:g} s"
            )
        for partition, records in consumer.poll(timeout_ms=500).items():
            for record in records:
                if record.offset >= end_offsets[partition]:
                    continue  # Written after the snapshot: not part of this read.
                read_count += 1
                if read_count > records_max:
                    raise TopicReadError(
                        f"more than {records_max} records to read; refusing to hold them all"
                    )
                yield record
            if consumer.position(partition) >= end_offsets[partition]:
                pending.discard(partition)
                consumer.pause(partition)


def _offsets_at(
    consumer: KafkaConsumer,
    partitions: Sequence[TopicPartition],
    moment: datetime.datetime,
    end_offsets: dict[TopicPartition, int],
) -> dict[TopicPartition, int]:
    """Each partition's first offset with a timestamp at or after `moment` (its end when none)."""
    milliseconds = int(moment.timestamp() * 1000)
    found = consumer.offsets_for_times({partition: milliseconds for partition in partitions})
    return {
        partition: end_offsets[partition] if found.get(partition) is None else found[partition].offset
        for partition in partitions
    }
