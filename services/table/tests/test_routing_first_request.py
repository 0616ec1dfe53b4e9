"""The owner routing reads a two-way stream's first request to route it, and the servicer then
gets every request, the first one included, in order (`routing._first_of`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from mahjong_table.routing import _first_of


async def _requests(count: int) -> AsyncIterator[int]:
    for number in range(count):
        await asyncio.sleep(0)
        yield number


async def _read(count: int) -> tuple[object, list[int]]:
    first, requests = await _first_of(_requests(count))
    return first, [request async for request in requests]


def test_every_request_reaches_the_servicer_first_included_in_order() -> None:
    assert asyncio.run(_read(4)) == (0, [0, 1, 2, 3])
    assert asyncio.run(_read(1)) == (0, [0])


def test_a_stream_without_requests_replays_none() -> None:
    assert asyncio.run(_read(0)) == (None, [])
