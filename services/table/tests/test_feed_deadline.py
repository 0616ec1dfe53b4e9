"""A feed reads a table's state and its deadline from memory together; the streams that ask the
store for the same thing at once share one read.

The writer records a version's deadline before it publishes the state. A feed that read the state
just before the writer published the next version found the deadline of that next version, asked
the store for the deadline of the state it held, and got the table's current deadline (the next
version's) in a read off the loop. The feed now reads the state again: its update is the latest
version's, with that version's own deadline, and the store is not asked.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from typing import Any

from mahjong.v1 import table_service_pb2 as messages
from mahjong_platform.database import transaction
from mahjong_table.selfplay import random_legal_command
from mahjong_table.servicer import Presence, TableServicer
from mahjong_table.wire import seat_sequence

from .conftest import TableServer
from .test_table_service import PLAYERS


def test_a_feed_that_read_a_state_the_writer_just_replaced_reads_it_again(
    table_server: TableServer, monkeypatch: Any
) -> None:
    table_id = table_server.open_table(PLAYERS)
    engine = table_server.engine
    generator = random.Random(3)

    def act() -> None:
        engine.act(
            lambda: transaction(table_server.session_factory),
            table_id,
            lambda state: random_legal_command(state, generator, timeout_chance=0.0, leave_chance=0.0),
        )

    act()
    before = engine.cached_state(table_id)
    assert before is not None
    act()
    after = engine.cached_state(table_id)
    assert after is not None and after.version > before.version
    known, deadline = engine.known_deadline(after)
    assert known and deadline is not None
    assert engine.known_deadline(before) == (False, None)

    # The feed's first read finds the state the writer has just replaced (its deadline is the next one's).
    reads = [before]
    cached_state = engine.cached_state
    monkeypatch.setattr(engine, "cached_state", lambda tid: reads.pop() if reads else cached_state(tid))
    asked_store: list[object] = []
    deadline_of = engine.deadline_of

    def counted_deadline_of(*arguments: Any) -> Any:
        asked_store.append(arguments)
        return deadline_of(*arguments)

    monkeypatch.setattr(engine, "deadline_of", counted_deadline_of)
    servicer = TableServicer(table_server.session_factory, engine, Presence())
    seat = 0

    async def first_update() -> bytes:
        feed: AsyncIterator[tuple[bytes, bool] | None] = servicer._view_updates(table_id, seat, 0)
        try:
            item = await feed.__anext__()
        finally:
            await feed.aclose()  # type: ignore[attr-defined]
        assert item is not None
        return item[0]

    update = messages.TableUpdate.FromString(asyncio.run(first_update()))
    assert update.view.sequence == seat_sequence(after, seat)
    assert update.view.deadline.ToDatetime().replace(tzinfo=deadline.tzinfo) == deadline
    assert asked_store == []


def test_the_streams_that_ask_for_a_table_together_share_one_store_read(
    table_server: TableServer, monkeypatch: Any
) -> None:
    """The four seats of a table this process does not hold in memory (a table taken over from
    another replica, or one its cache let go) open their streams together: each would ask the
    store for it, four reads in the read threads where one serves them all."""
    table_id = table_server.open_table(PLAYERS)
    engine = table_server.engine
    engine.forget_where(lambda stale: stale == table_id)  # as a takeover does (`ownership`)
    assert engine.cached_state(table_id) is None
    reads: list[str] = []
    read_state = engine.read_state

    def slow_read_state(*arguments: Any) -> Any:
        reads.append(arguments[1])
        time.sleep(0.2)  # the other callers ask while this read runs
        return read_state(*arguments)

    monkeypatch.setattr(engine, "read_state", slow_read_state)
    servicer = TableServicer(table_server.session_factory, engine, Presence())

    async def four_callers() -> list[Any]:
        return list(await asyncio.gather(*[servicer._state(table_id) for _ in range(4)]))

    states = asyncio.run(four_callers())
    assert reads == [table_id]
    assert all(state is states[0] for state in states) and states[0].table_id == table_id
