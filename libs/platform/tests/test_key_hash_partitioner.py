"""The relay's partitioner keeps each key's hash but picks exactly Kafka's default partition (the
table engine's ownership of a table follows its key's partition)."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from kafka.partitioner.default import DefaultPartitioner
from mahjong_platform import outbox
from mahjong_platform.outbox import KeyHashCachingPartitioner


class _Cluster:
    """The two metadata questions a partitioner asks, for one topic."""

    def __init__(self, partitions: set[int]) -> None:
        self._partitions = partitions

    def topics(self) -> set[str]:
        return {"topic"}

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self._partitions if topic == "topic" else None

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return self._partitions


@pytest.mark.parametrize("partitions", [{0}, {0, 1}, {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5, 6}, {2, 5, 9}])
def test_each_key_goes_to_kafkas_default_partition_first_and_second_time(partitions: set[int]) -> None:
    cached, default = KeyHashCachingPartitioner(), DefaultPartitioner()
    cluster: Any = _Cluster(partitions)
    generator = random.Random(7)
    keys = [str(uuid.UUID(int=generator.getrandbits(128))).encode() for _ in range(2_000)]
    keys += [generator.randbytes(generator.randrange(0, 40)) for _ in range(2_000)]
    for _ in range(2):  # computed, then kept
        for key in keys:
            expected = default.partition("topic", None, key, None, None, cluster)
            assert cached.partition("topic", None, key, None, None, cluster) == expected


def test_the_kept_hashes_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outbox, "KEY_HASHES_MAX", 10)
    partitioner, default = KeyHashCachingPartitioner(), DefaultPartitioner()
    cluster: Any = _Cluster({0, 1, 2})
    for index in range(100):
        key = f"stream-{index}".encode()
        assert partitioner.partition("topic", None, key, None, None, cluster) == default.partition(
            "topic", None, key, None, None, cluster
        )
        assert len(partitioner._hashes) <= 10
