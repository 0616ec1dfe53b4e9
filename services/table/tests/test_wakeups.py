"""`TableWakeups`: a change wakes the streams waiting for its table two turns of the loop later,
whichever thread committed it; a change committed on the loop's own thread (the group commit run
by a loop callback) is queued without `call_soon_threadsafe`'s write to the loop's self-pipe."""

from __future__ import annotations

import asyncio
import threading

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
