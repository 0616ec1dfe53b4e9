"""`DeadLetterRedriver`, the service side of `DeadLetterService` (issue 14), without a broker: a
malformed id is INVALID_ARGUMENT before anything is read, a broker that does not answer is
UNAVAILABLE (never INTERNAL), and ListRedrives names the process's groups and only their re-drives
of this dead letter topic. The re-drive itself on the real broker: tools/mjctl/tests/test_dlq.py."""

from __future__ import annotations

import datetime
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy
from mahjong.v1 import dead_letter_service_pb2, envelope_pb2
from mahjong_platform import dead_letters
from mahjong_platform.database import create_engine_for, create_session_factory, transaction
from mahjong_platform.dead_letter_service import DeadLetterRedriver, RedriveTarget
from mahjong_platform.dead_letters import DeadLetterEntry, redrive
from mahjong_platform.envelopes import utc_now
from mahjong_platform.errors import InvalidArgumentError, UnavailableError
from mahjong_platform.schema import dead_letter_redrives, platform_metadata, processed_events
from mahjong_platform.topic_reading import reading_consumer
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

TOPIC = "mahjong.dlq.v1"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = create_engine_for(f"sqlite:///{tmp_path / 'redrives.sqlite3'}")
    platform_metadata.create_all(engine)
    yield engine
    engine.dispose()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def redriver(engine: Engine, bootstrap: str = "127.0.0.1:1") -> DeadLetterRedriver:
    targets = [RedriveTarget("group-a", lambda *_: None), RedriveTarget("group-b", lambda *_: None)]
    return DeadLetterRedriver(engine, [bootstrap], TOPIC, targets, read_timeout_seconds=2.0)


@pytest.mark.parametrize("entry_id", ["", "7", "x:1", "-1:0", "1:2:3", "1: 2"])
def test_a_malformed_id_is_invalid_argument_and_nothing_is_read(engine: Engine, entry_id: str) -> None:
    with pytest.raises(InvalidArgumentError, match="<partition>:<offset>"):
        redriver(engine).redrive(entry_id)


def test_a_broker_that_does_not_answer_is_unavailable_within_the_read_timeout(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read timeout (2 s here) bounds reaching the broker too: kafka-python's own bootstrap
    timeout (30 s) made an operator's re-drive wait 30 s whatever the service's setting. Checked by
    what the reader asks of its consumer, not by the clock (no wall-clock assertions)."""
    bootstrap_timeouts: list[float] = []

    def recording_consumer(servers: object, *, bootstrap_timeout_seconds: float) -> object:
        bootstrap_timeouts.append(bootstrap_timeout_seconds)
        return reading_consumer(servers, bootstrap_timeout_seconds=bootstrap_timeout_seconds)  # type: ignore[arg-type]

    monkeypatch.setattr(dead_letters, "reading_consumer", recording_consumer)
    with pytest.raises(UnavailableError, match="nothing changed"):
        redriver(engine, f"127.0.0.1:{closed_port()}").redrive("0:5")
    assert bootstrap_timeouts == [2.0]  # the redriver's read timeout, not kafka-python's 30 s


def test_list_redrives_names_the_groups_and_only_their_redrives_of_this_topic(engine: Engine) -> None:
    moment = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
    rows = [
        (TOPIC, 1, 9, "group-b", "e2", "already_applied"),
        (TOPIC, 0, 4, "group-a", "e1", "applied"),
        (TOPIC, 0, 5, "group-z", "e3", "applied"),  # another service's group
        ("other.dlq", 0, 1, "group-a", "e4", "applied"),  # another dead letter topic
    ]
    with transaction(create_session_factory(engine)) as session:
        for topic, partition, offset, group, event_id, outcome in rows:
            session.execute(
                dead_letter_redrives.insert().values(
                    dlq_topic=topic,
                    dlq_partition=partition,
                    dlq_offset=offset,
                    consumer_group=group,
                    event_id=event_id,
                    outcome=outcome,
                    redriven_at=moment,
                )
            )
    answer = redriver(engine).list_redrives()
    assert list(answer.consumer_groups) == ["group-a", "group-b"]
    assert [(r.entry_id, r.consumer_group, r.event_id, r.outcome) for r in answer.redrives] == [
        ("0:4", "group-a", "e1", dead_letter_service_pb2.REDRIVE_OUTCOME_APPLIED),
        ("1:9", "group-b", "e2", dead_letter_service_pb2.REDRIVE_OUTCOME_ALREADY_APPLIED),
    ]
    assert answer.redrives[0].redriven_at.ToDatetime(tzinfo=datetime.UTC) == moment


@pytest.mark.integration
def test_an_event_the_group_applies_while_it_is_re_driven_is_already_applied_not_an_error(
    postgres_database_url: str,
) -> None:
    """The group's live consumer records the event as processed between the re-drive's check and
    its own insert (a re-delivery of the original, applied now that the fix is in): the re-drive
    answers already_applied and records the entry, it does not fail on the primary key (before:
    the IntegrityError escaped, INTERNAL)."""
    engine = create_engine_for(postgres_database_url)
    platform_metadata.create_all(engine)
    envelope = envelope_pb2.Envelope(event_id="event-1", stream_id="table-1")
    letter = envelope_pb2.DeadLetter(
        topic="mahjong.table.v1",
        partition=0,
        offset=3,
        consumer_group="group-a",
        value=envelope.SerializeToString(),
    )
    entry = DeadLetterEntry(TOPIC, 0, 7, letter, envelope)
    calls: list[str] = []

    def applied_meanwhile_by_the_consumer(
        session: Session, applied: envelope_pb2.Envelope, _: object
    ) -> None:
        calls.append(applied.event_id)
        with engine.begin() as other:  # the live consumer's own transaction, committed first
            other.execute(
                processed_events.insert().values(
                    consumer_group="group-a", event_id=applied.event_id, processed_at=utc_now()
                )
            )

    try:
        result = redrive(engine, entry, applied_meanwhile_by_the_consumer)
        assert (result.outcome, result.newly, calls) == ("already_applied", True, ["event-1"])
        again = redrive(engine, entry, applied_meanwhile_by_the_consumer)
        assert (again.outcome, again.newly, calls) == ("already_applied", False, ["event-1"])
        with transaction(create_session_factory(engine)) as session:
            rows = session.execute(sqlalchemy.select(dead_letter_redrives)).all()
        assert [(row.dlq_partition, row.dlq_offset, row.outcome) for row in rows] == [
            (0, 7, "already_applied")
        ]
    finally:
        engine.dispose()
