"""`TableWakeups`: a change wakes the streams waiting for its table two turns of the loop later,
whichever thread committed it; a change committed on the loop's own thread (the group commit run
by a loop callback) is queued without `call_soon_threadsafe`'s write to the loop's self-pipe; a
Play stream's held updates are timed by one alarm per hold, not a timer per wait."""

from __future__ import annotations

import asyncio
import threading
import time

from mahjong_table import servicer as servicer_module
from mahjong_table.servicer import TableWakeups
from mahjong_table.tables import TableChanges


class _CountingLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self.threadsafe_calls = 0

    def call_soon_threadsafe(self, *arguments, **keywords):  # type: ignore[no-untyped-def]
        self.threadsafe_calls += 1
        return super().call_soon_threadsafe(*arguments, **keywords)


def _run(main: object) -> _CountingLoop:
    loop = _CountingLoop()
    try:
        loop.run_until_complete(main(loop))  # type: ignore[operator]
    finally:
        loop.close()
    return loop


def test_a_change_committed_on_the_loop_wakes_its_table_without_the_self_pipe() -> None:
    changes = TableChanges()
    wakeups = TableWakeups(changes)
    order: list[str] = []

    async def main(loop: _CountingLoop) -> None:
        waiting = asyncio.ensure_future(wakeups.wait("t", 0, 60.0, loop=loop))
        other = asyncio.ensure_future(wakeups.wait("u", 0, 60.0, loop=loop))
        await asyncio.sleep(0)  # both wait now
        changes.notify("t", 1)  # on the loop's thread, as a group commit run by the loop
        loop.call_soon(order.append, "answers")  # what the commit handed the loop just before
        await asyncio.wait_for(waiting, 5)
        order.append("woken")
        assert not other.done()
        other.cancel()

    loop = _run(main)
    assert order == ["answers", "woken"]
    assert loop.threadsafe_calls == 0


def test_a_change_committed_on_another_thread_wakes_its_table_through_the_self_pipe() -> None:
    changes = TableChanges()
    wakeups = TableWakeups(changes)

    async def main(loop: _CountingLoop) -> None:
        waiting = asyncio.ensure_future(wakeups.wait("t", 0, 60.0, loop=loop))
        await asyncio.sleep(0)
        writer = threading.Thread(target=changes.notify, args=("t", 1))
        writer.start()
        await asyncio.wait_for(waiting, 5)
        writer.join()

    loop = _run(main)
    assert loop.threadsafe_calls == 1


class _TimerCountingLoop(_CountingLoop):
    def __init__(self) -> None:
        super().__init__()
        self.timers = 0

    def call_at(self, *arguments, **keywords):  # type: ignore[no-untyped-def]
        self.timers += 1
        return super().call_at(*arguments, **keywords)


def test_a_wait_without_a_timeout_makes_no_timer_and_ends_with_its_future_or_a_change() -> None:
    changes = TableChanges()
    wakeups = TableWakeups(changes)

    async def main(loop: _TimerCountingLoop) -> None:
        future: asyncio.Future[None] = loop.create_future()
        waiting = asyncio.ensure_future(wakeups.wait("t", 0, None, future, loop))
        await asyncio.sleep(0)
        assert loop.timers == 0
        future.set_result(None)
        await asyncio.wait_for(waiting, 5)
        waiting = asyncio.ensure_future(wakeups.wait("t", 0, None, loop=loop))
        await asyncio.sleep(0)
        changes.notify("t", 1)
        await asyncio.wait_for(waiting, 5)

    loop = _TimerCountingLoop()
    try:
        loop.run_until_complete(main(loop))
    finally:
        loop.close()


def test_a_held_feeds_waits_share_the_holds_one_alarm() -> None:
    """A Play stream's hold arms one timer (`arm_hold`) that wakes whichever wait of the feed is
    on when the hold runs out; a wait that the alarm wakes in time needs no timer of its own, one
    that must end sooner still gets one; a disarmed hold wakes nobody."""

    async def main(loop: _TimerCountingLoop) -> None:
        play = servicer_module._PlayStream()
        until = time.monotonic() + 0.05
        play.arm_hold(loop, until)
        assert loop.timers == 1
        assert play.alarm_wakes_by(0.5) and not play.alarm_wakes_by(0.001)
        for _ in range(3):  # three waits of the hold, as three changes of the table would end them
            future = loop.create_future()
            play.wake_on = future
            loop.call_soon(future.set_result, None)
            await future
        future = loop.create_future()
        play.wake_on = future
        await asyncio.wait_for(future, 5)  # the alarm rang
        assert time.monotonic() >= until - 0.001
        assert loop.timers == 2  # the alarm and `wait_for`'s own timeout, nothing per wait
        assert not play.alarm_wakes_by(0.5)  # rang: a later wait needs its own timer
        play.arm_hold(loop, time.monotonic() + 0.01)
        play.disarm_hold()
        future = loop.create_future()
        play.wake_on = future
        await asyncio.sleep(0.05)
        assert not future.done()

    loop = _TimerCountingLoop()
    try:
        loop.run_until_complete(main(loop))
    finally:
        loop.close()
