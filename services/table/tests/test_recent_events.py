"""What Watch streams rely on in the table engine: the in-memory tail of committed events
(`RecentEvents`) and the per-table change notification (`TableChanges`)."""

from __future__ import annotations

import threading
import time

from mahjong.v1 import envelope_pb2
from mahjong_table.tables import RecentEvents, TableChanges


def envelopes(first: int, last: int, table_id: str = "t") -> list[envelope_pb2.Envelope]:
    return [
        envelope_pb2.Envelope(stream_id=table_id, sequence=sequence) for sequence in range(first, last + 1)
    ]


def sequences(found: list[envelope_pb2.Envelope] | None) -> list[int] | None:
    return None if found is None else [envelope.sequence for envelope in found]


def test_memory_answers_only_when_it_holds_every_event_asked_for() -> None:
    recent = RecentEvents(per_table=4)
    assert recent.after("t", 0, 0, 10) is None  # nothing remembered: ask the store
    recent.add("t", envelopes(1, 3))
    assert sequences(recent.after("t", 0, 3, 10)) == [1, 2, 3]
    assert sequences(recent.after("t", 1, 3, 1)) == [2]  # the limit
    assert sequences(recent.after("t", 3, 3, 10)) == []  # up to date: nothing new
    assert recent.after("t", 3, 5, 10) is None  # something committed it has not seen
    recent.add("t", envelopes(4, 6))  # only the last four stay
    assert sequences(recent.after("t", 2, 6, 10)) == [3, 4, 5, 6]
    assert recent.after("t", 1, 6, 10) is None  # event 2 fell out: ask the store


def test_a_gap_starts_the_table_over() -> None:
    recent = RecentEvents()
    recent.add("t", envelopes(1, 2))
    recent.add("t", envelopes(5, 6))  # 3 and 4 were committed elsewhere
    assert recent.after("t", 2, 6, 10) is None
    assert sequences(recent.after("t", 4, 6, 10)) == [5, 6]


def test_least_recently_used_tables_are_forgotten() -> None:
    recent = RecentEvents(tables=2)
    for table_id in ("a", "b", "c"):
        recent.add(table_id, envelopes(1, 1, table_id))
    assert recent.after("a", 0, 1, 10) is None
    assert sequences(recent.after("c", 0, 1, 10)) == [1]


def test_a_change_wakes_the_watchers_of_its_table_even_when_it_ends_the_game() -> None:
    changes = TableChanges()
    woke: list[float] = []

    def watch() -> None:
        started = time.monotonic()
        changes.wait("t", 3, 600.0)
        woke.append(time.monotonic() - started)

    watcher = threading.Thread(target=watch)
    watcher.start()
    time.sleep(0.05)
    changes.notify("other", 9)  # another table's change does not satisfy this watcher
    time.sleep(0.05)
    assert not woke
    changes.notify("t", 4, ended=True)
    watcher.join(300)
    assert woke and woke[0] < 300  # woken by the change, not by its 600 s timeout
    assert changes.version("t") == 4


def test_two_commits_published_out_of_order_never_hide_an_event() -> None:
    """Commits V+1 and V+2 of one table, published V+2 first: the tail must not end at V+1, and the
    known version must not go back, or a watcher at V+1 would wait forever for V+2."""
    recent, changes = RecentEvents(), TableChanges()
    recent.add("t", envelopes(1, 3))
    changes.notify("t", 3)
    recent.add("t", envelopes(5, 5))  # the later commit published first: a gap, the tail restarts
    changes.notify("t", 5)
    recent.add("t", envelopes(4, 4))  # the earlier commit published late: superseded, ignored
    changes.notify("t", 4)
    assert changes.version("t") == 5
    assert recent.after("t", 3, changes.version("t"), 10) is None  # 4 is not in memory: the store
    assert sequences(recent.after("t", 4, changes.version("t"), 10)) == [5]


def test_a_reader_without_the_lock_sees_a_gapless_run_while_a_writer_adds() -> None:
    """`after` reads a table's tail with no lock while another thread adds to it (and the oldest
    events fall out): every answer is a gapless run from the event asked for, or None."""
    recent = RecentEvents(per_table=8)
    recent.add("t", envelopes(1, 1))
    done = threading.Event()
    last = 400

    def write() -> None:
        for sequence in range(2, last, 3):  # the last batch ends at `last`
            recent.add("t", envelopes(sequence, sequence + 2))
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    answers = 0
    while not done.is_set() or answers < 100:
        found = recent.after("t", 1 + answers % 300, 0, 5)
        answers += 1
        if found is not None:
            asked = 1 + (answers - 1) % 300
            assert sequences(found) == list(range(asked + 1, asked + 1 + len(found)))
    writer.join()
    assert sequences(recent.after("t", last - 8, last, 10)) == list(range(last - 7, last + 1))


def test_a_change_nobody_waits_for_makes_no_condition_and_a_waiter_is_still_woken() -> None:
    """The asyncio streams wait through the listeners: a commit of a table no thread waits on
    makes and notifies no condition; a thread that waits makes one, and the next change wakes it."""
    changes = TableChanges()
    changes.notify_many([("t", 1, False), ("u", 1, False)])
    assert changes._conditions == {}
    woke = threading.Event()

    def watch() -> None:
        changes.wait("t", 1, 600.0)
        woke.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    while "t" not in changes._conditions:
        time.sleep(0.001)
    changes.notify_many([("t", 2, True)])
    watcher.join(timeout=30)
    assert woke.is_set()
    assert changes._conditions == {}  # ended: dropped once its watchers were woken
