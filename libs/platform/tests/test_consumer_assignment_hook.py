"""`TrackedConsumer`'s ``on_assignment`` on the real broker: each member of a group is told the
partitions the group gave it, on the thread that polls (never kafka-python's network thread, which
must not wait for a database: README "Reliability"); the table engine claims its tables there
(README "Scale-out: replicas"). A hook that fails fails the poll and is told again."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from mahjong_platform.topics import Topics
from mahjong_platform.tracked_consumer import Assignment, TrackedConsumer
from sqlalchemy.engine import Engine

pytestmark = pytest.mark.integration

JOIN_SECONDS = 120.0  # a hang guard only
PARTITIONS = 2  # the `kafka_topics` fixture's


class Recorder:
    """Keeps each assignment it is told and the thread it was told on."""

    def __init__(self, fail_first: bool = False) -> None:
        self.assignments: list[Assignment] = []
        self.threads: set[threading.Thread] = set()
        self._fail_next = fail_first

    def __call__(self, assignment: Assignment) -> None:
        self.threads.add(threading.current_thread())
        if self._fail_next:
            self._fail_next = False
            raise RuntimeError("the owner directory is unreachable")
        self.assignments.append(assignment)

    def partitions(self) -> set[int] | None:
        if not self.assignments:
            return None
        return {partition for _topic, partition in self.assignments[-1].partitions}


def test_each_member_is_told_its_share_of_the_partitions_on_the_polling_thread(
    sqlite_engine: Engine,
    kafka_topics: Topics,
    new_tracked_consumer: Callable[..., TrackedConsumer],
    unique_prefix: str,
) -> None:
    group_id = unique_prefix + "owners"
    first_hook, second_hook = Recorder(fail_first=True), Recorder()
    first = new_tracked_consumer(sqlite_engine, group_id=group_id, on_assignment=first_hook)
    second = new_tracked_consumer(sqlite_engine, group_id=group_id, on_assignment=second_hook)
    failed = 0
    deadline = time.monotonic() + JOIN_SECONDS
    while True:
        for consumer in (first, second):
            try:
                consumer.poll_once(timeout_ms=200)
            except RuntimeError as error:
                assert "owner directory" in str(error)
                failed += 1
        shares = (first_hook.partitions(), second_hook.partitions())
        # Until both have been told the rebalance that split the group, one may still hold what it
        # was told alone (every partition: a revocation is not told) while the other is told its
        # share: wait for the split itself, each member told its own part, together all of them.
        if (
            shares[0]
            and shares[1]
            and not shares[0] & shares[1]
            and shares[0] | shares[1] == set(range(PARTITIONS))
        ):
            break
        assert time.monotonic() < deadline, f"the group never split its partitions: {shares}"
    assert failed == 1  # the failing hook failed its poll once, then was told again
    assert first_hook.threads == second_hook.threads == {threading.current_thread()}
    assert first_hook.assignments[-1].partition_counts == {kafka_topics.table: PARTITIONS}
