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
from mahjong.v1 import dead_letter_service_pb2
from mahjong_platform.database import create_engine_for, create_session_factory, transaction
from mahjong_platform.dead_letter_service import DeadLetterRedriver, RedriveTarget
from mahjong_platform.errors import InvalidArgumentError, UnavailableError
from mahjong_platform.schema import dead_letter_redrives, platform_metadata
from sqlalchemy.engine import Engine

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


def test_a_broker_that_does_not_answer_is_unavailable(engine: Engine) -> None:
    with pytest.raises(UnavailableError, match="nothing changed"):
        redriver(engine, f"127.0.0.1:{closed_port()}").redrive("0:5")


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
