"""A Play stream whose client sends without reading holds a bounded number of answers.

Every request after `open` is answered on the stream (a refusal at least). The answers wait in the
server until the client reads them; when the stream read every request at once, a seated player
could make the table engine hold any number of them (one run before 9724006: 200,000 one-line
requests left 123,738 answers queued). It reads no further while `PLAY_ANSWERS_UNSENT_MAX` answers
wait, so the client's own sends stall under gRPC flow control; reading the answers lets it go on,
and every request is answered once. (`test_play_stream`'s flood test reads as it sends, so it
passes with or without the bound: this one fails without it.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import cast

from mahjong.v1 import table_service_pb2 as messages
from mahjong_platform.auth import Identity, identity_scope
from mahjong_table.servicer import PLAY_ANSWERS_UNSENT_MAX, PLAY_COMMANDS_IN_FLIGHT, Presence, TableServicer

from .conftest import TableServer
from .test_table_service import PLAYERS

FLOOD = 1_000
ANSWERS_SECONDS = 60.0
"""A bound on a hang (every answer is ready at once), not a timing check."""


def test_a_client_that_sends_without_reading_holds_at_most_the_bound(table_server: TableServer) -> None:
    table_id = table_server.open_table(PLAYERS)
    servicer = TableServicer(table_server.session_factory, table_server.engine, Presence())
    pulled = 0

    async def requests() -> AsyncIterator[messages.PlayRequest]:
        nonlocal pulled
        yield messages.PlayRequest(open=messages.WatchViewRequest(table_id=table_id))
        for _ in range(FLOOD):
            pulled += 1
            yield messages.PlayRequest(open=messages.WatchViewRequest(table_id=table_id))  # refused

    async def flood() -> tuple[int, int]:
        serialized = cast(AsyncGenerator[bytes], servicer.Play(requests(), None))

        async def next_response() -> messages.PlayResponse:
            return messages.PlayResponse.FromString(await serialized.__anext__())

        responses = [await next_response()]
        for _ in range(10 * FLOOD):  # the loop runs the stream's reader as far as it will go
            await asyncio.sleep(0)
        pulled_unread = pulled

        async def read_every_answer() -> None:
            answers = sum(1 for response in responses if response.WhichOneof("response") == "answer")
            while answers < FLOOD:
                response = await next_response()
                answers += response.WhichOneof("response") == "answer"

        await asyncio.wait_for(read_every_answer(), ANSWERS_SECONDS)
        await serialized.aclose()
        return pulled_unread, pulled

    with identity_scope(Identity("east", frozenset())):
        pulled_unread, pulled_in_all = asyncio.run(flood())
    assert pulled_unread <= PLAY_ANSWERS_UNSENT_MAX + PLAY_COMMANDS_IN_FLIGHT + 1, pulled_unread
    assert pulled_in_all == FLOOD  # reading the answers let the stream read (and answer) the rest
