"""The SQLite relay's feed (`outbox._Feed`): the outbox rows this process committed, handed to its
relay so it publishes them without reading them back. It may only ever give the run that
continues exactly after the last id published; anything else makes the relay read the outbox."""

from __future__ import annotations

from mahjong_platform import outbox


def rows(*event_ids: str) -> list[dict[str, object]]:
    return [
        {"topic": "t", "message_key": "k", "message_value": event_id.encode(), "event_id": event_id}
        for event_id in event_ids
    ]


def ids(messages: list[outbox.OutboxMessage] | None) -> list[tuple[int, str]] | None:
    return None if messages is None else [(message.id, message.event_id) for message in messages]


def test_a_feed_gives_the_run_that_continues_after_the_last_id_published() -> None:
    feed = outbox._Feed()
    assert feed.take(1, 10) is None  # empty: read
    feed.add([(5, rows("e5", "e6", "e7")), (8, rows("e8"))])
    assert feed.take(4, 10) is None  # row 4 was never handed over: read it
    assert ids(feed.take(5, 2)) == [(5, "e5"), (6, "e6")]  # at most the batch
    assert ids(feed.take(7, 10)) == [(7, "e7"), (8, "e8")]  # across runs
    assert feed.take(9, 10) is None
    message = outbox._Feed()
    message.add([(1, rows("e1"))])
    (taken,) = message.take(1, 1) or []
    assert (taken.topic, taken.message_key, taken.message_value, taken.event_id) == ("t", "k", b"e1", "e1")


def test_a_feed_stops_at_a_gap_and_drops_what_a_read_published() -> None:
    feed = outbox._Feed()
    feed.add([(1, rows("e1", "e2")), (6, rows("e6")), (3, rows("e3", "e4"))])  # handed over out of order
    assert ids(feed.take(1, 10)) == [(1, "e1"), (2, "e2")]  # stops before the gap at 3
    assert feed.take(3, 10) is None  # the run at 6 is first: read 3 to 5 from the outbox
    assert ids(feed.take(6, 10)) == [(6, "e6")]  # after the read published 3..5 (the run of 3 is older)
    assert feed.take(7, 10) is None
    feed.add([(7, rows("e7", "e8", "e9"))])
    assert ids(feed.take(9, 10)) == [(9, "e9")]  # 7 and 8 went out with a read


def test_a_feed_that_the_relay_does_not_keep_up_with_forgets_everything() -> None:
    feed = outbox._Feed()
    feed.add([(1, rows(*[f"e{index}" for index in range(1, outbox.RELAY_FEED_ROWS_MAX + 1)]))])
    assert len(feed.take(1, outbox.RELAY_FEED_ROWS_MAX) or []) == outbox.RELAY_FEED_ROWS_MAX
    feed.add([(1, rows(*[f"e{index}" for index in range(1, outbox.RELAY_FEED_ROWS_MAX + 2)]))])
    assert feed.take(1, 10) is None  # over the bound: the relay reads the outbox instead
