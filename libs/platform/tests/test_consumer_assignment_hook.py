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


def poll_until_split(
    first: TrackedConsumer, second: TrackedConsumer, hooks: tuple[Recorder, Recorder]
) -> int:
    """Poll both consumers in turn, on this thread, until each was told its own part of the
    partitions, together all of them; return how many polls failed in the hook."""
    failed = 0
    deadline = time.monotonic() + JOIN_SECONDS
    while True:
        for consumer in (first, second):
            try:
                consumer.poll_once(timeout_ms=200)
            except RuntimeError as error:
                assert "owner directory" in str(error)
                failed += 1
        shares = (hooks[0].partitions(), hooks[1].partitions())
        # Until both have been told the rebalance that split the group, one may still hold what it
        # was told alone (every partition: a revocation is not told) while the other is told its
        # share: wait for the split itself, each member told its own part, together all of them.
        if (
            shares[0]
            and shares[1]
            and not shares[0] & shares[1]
            and shares[0] | shares[1] == set(range(PARTITIONS))
        ):
            return failed
        assert time.monotonic() < deadline, f"the group never split its partitions: {shares}"


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
    failed = poll_until_split(first, second, (first_hook, second_hook))
    assert failed == 1  # the failing hook failed its poll once, then was told again
    assert first_hook.threads == second_hook.threads == {threading.current_thread()}
    assert first_hook.assignments[-1].partition_counts == {kafka_topics.table: PARTITIONS}


def test_a_group_leader_whose_join_finished_between_its_polls_is_told_its_share(
    sqlite_engine: Engine,
    new_tracked_consumer: Callable[..., TrackedConsumer],
    unique_prefix: str,
) -> None:
    """kafka-python 3.0.12 drops a join that finished while its consumer was not polling and sends
    another JoinGroup; the leader's starts a new rebalance, which the follower finishes on its own
    polls again: between the leader's, so the leader was never told its share (seen once in CI)."""
    group_id = unique_prefix + "between"
    hooks = (Recorder(), Recorder())
    consumers = (
        new_tracked_consumer(sqlite_engine, group_id=group_id, on_assignment=hooks[0]),
        new_tracked_consumer(sqlite_engine, group_id=group_id, on_assignment=hooks[1]),
    )
    poll_until_split(*consumers, hooks)
    leading = 0 if consumers[0]._consumer._coordinator._is_leader else 1
    leader, follower = consumers[leading], consumers[1 - leading]
    leader_hook, follower_hook = hooks[leading], hooks[1 - leading]
    coordinator = leader._consumer._coordinator
    assert coordinator._is_leader and not follower._consumer._coordinator._is_leader
    leader_told, follower_told = len(leader_hook.assignments), len(follower_hook.assignments)

    # The leader rejoins (as after a metadata change): its JoinGroup starts a rebalance and waits
    # for the follower, so a 1 ms poll returns with the join in flight.
    coordinator.request_rejoin()
    leader.poll_once(timeout_ms=1)
    assert coordinator.rebalance_in_progress()
    # The follower hears of the rebalance by its heartbeat and joins on its own polls: that answers
    # the leader's JoinGroup, and the leader's SyncGroup, while the leader does not poll.
    deadline = time.monotonic() + JOIN_SECONDS
    while len(follower_hook.assignments) == follower_told or not coordinator._join_task.is_done:
        assert time.monotonic() < deadline, "the follower never joined the leader's rebalance"
        follower.poll_once(timeout_ms=200)
    generation = follower._consumer._coordinator._generation.generation_id

    # The leader's next poll applies that join: no JoinGroup again (a new rebalance that only the
    # follower's polls would finish), and the leader is told its share of the same generation.
    leader.poll_once(timeout_ms=200)
    assert len(leader_hook.assignments) == leader_told + 1
    assert coordinator.stable() and coordinator._heartbeat_enabled
    assert coordinator._generation.generation_id == generation
    shares = (leader_hook.partitions(), follower_hook.partitions())
    assert shares[0] and shares[1] and not shares[0] & shares[1]
    assert shares[0] | shares[1] == set(range(PARTITIONS))
