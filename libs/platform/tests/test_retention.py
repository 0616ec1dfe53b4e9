"""Retention (`mahjong_platform.retention`): old processed ids and sent outbox rows go, everything
exactly-once still needs stays — unsent messages whatever their age, recent ids, every event."""

from __future__ import annotations

import datetime

import sqlalchemy
from mahjong_platform.database import create_session_factory, transaction
from mahjong_platform.retention import RetentionWorker
from mahjong_platform.schema import outbox_messages, processed_events
from sqlalchemy.engine import Engine

NOW = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.UTC)
WEEK = datetime.timedelta(days=7)


def fill(engine: Engine) -> None:
    """Processed ids and outbox rows 10 days, 7 days + 1 s, 6 days and 1 hour old."""
    ages = [datetime.timedelta(days=10), WEEK + datetime.timedelta(seconds=1), datetime.timedelta(days=6)]
    ages.append(datetime.timedelta(hours=1))
    with transaction(create_session_factory(engine)) as session:
        for index, age in enumerate(ages):
            moment = NOW - age
            for group in ("scoring", "matchmaking"):
                session.execute(
                    processed_events.insert().values(
                        consumer_group=group, event_id=f"event-{index}", processed_at=moment
                    )
                )
            for sent in (True, False):
                session.execute(
                    outbox_messages.insert().values(
                        topic="t",
                        message_key="k",
                        message_value=b"v",
                        event_id=f"message-{index}-{sent}",
                        created_at=moment,
                        sent_at=moment if sent else None,
                    )
                )


def remaining(engine: Engine) -> tuple[list[str], list[str]]:
    with transaction(create_session_factory(engine)) as session:
        ids = session.execute(
            sqlalchemy.select(processed_events.c.event_id).where(
                processed_events.c.consumer_group == "scoring"
            )
        ).scalars()
        messages = session.execute(sqlalchemy.select(outbox_messages.c.event_id)).scalars()
        return sorted(ids), sorted(messages)


def test_a_pass_deletes_only_what_is_older_than_the_window_in_batches(
    migrated_engine: Engine,
) -> None:
    fill(migrated_engine)
    worker = RetentionWorker(migrated_engine, WEEK, batch_rows=1, clock=lambda: NOW)
    pruned = worker.run_once()
    assert (pruned.processed_events, pruned.sent_outbox_messages) == (4, 2)  # two groups × two ids
    ids, messages = remaining(migrated_engine)
    assert ids == ["event-2", "event-3"]
    # Unsent messages stay whatever their age: the relay still has to publish them.
    assert messages == [
        "message-0-False",
        "message-1-False",
        "message-2-False",
        "message-2-True",
        "message-3-False",
        "message-3-True",
    ]
    assert worker.run_once().processed_events == 0  # nothing left to prune
