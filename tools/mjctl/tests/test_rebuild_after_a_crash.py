"""#12.4 on the real broker and PostgreSQL: the live ledger crashes in the middle of a batch and
resumes; ``mjctl rebuild ledger`` is still identical, the ``house:*`` accounts included.

Six tables' settlements spread over three partitions, produced in the reverse of their time order,
so the live consumer reads them in an order the rebuild (occurrence-time merge) does not: only
what derives from the events themselves may end up in the projection.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

import pytest
import sqlalchemy
from mahjong.v1 import envelope_pb2
from mahjong_ledger.app import CONSUMER_GROUP as LEDGER_GROUP
from mahjong_ledger.app import migrate as migrate_ledger
from mahjong_ledger.models import ledger_accounts, ledger_games, ledger_transfers
from mahjong_ledger.projection import SettlementProjection
from mahjong_ledger.repository import LedgerRepository
from mahjong_ledger.testing import game_settled_envelope, instruction_envelope, payee
from mahjong_platform.database import create_engine_for, create_session_factory, transaction
from mahjong_platform.event_store import EventStore
from mahjong_platform.testing import produce_envelopes, relay_until_drained
from mahjong_platform.topics import Topics, ensure_topics
from mahjong_platform.tracked_consumer import MessagePosition, TrackedConsumer
from mjctl.__main__ import main
from sqlalchemy.engine import Engine

pytestmark = pytest.mark.integration

TABLES = 6
GAMES_START = datetime.datetime(2026, 4, 1, 12, tzinfo=datetime.UTC)
GRANT_TIME = datetime.datetime(2026, 3, 1, tzinfo=datetime.UTC)
CONSUME_DEADLINE_SECONDS = 300.0


class _CrashedError(Exception):
    pass


def game_time(table: int, second: int) -> datetime.datetime:
    # The last table is the earliest game: production order is the reverse of time order.
    return GAMES_START + datetime.timedelta(minutes=TABLES - table, seconds=second)


def settlement_stream(table: int) -> list[envelope_pb2.Envelope]:
    payer, winner = f"player:t{table}a", f"player:t{table}b"
    table_id = f"table-{table}"
    lines = [
        ("win", payer, [payee(winner, 1_000 + table)]),
        ("escape_penalty", payer, [payee(winner, 300), payee("house:escape", 700)]),
        ("rake", payer, [payee("house:rake", 50)]),
        ("rake", winner, [payee("house:rake", 50)]),
    ]
    envelopes = [
        instruction_envelope(
            f"{table_id}/{line}",
            line_payer,
            payees,
            table_id=table_id,
            reason=reason,
            sequence=line,
            occurred_at=game_time(table, line),
        )
        for line, (reason, line_payer, payees) in enumerate(lines, start=1)
    ]
    return [*envelopes, game_settled_envelope(table_id, len(lines), len(lines) + 1)]


def row_count(engine: Engine, table: sqlalchemy.Table) -> int:
    with engine.connect() as connection:
        query = sqlalchemy.select(sqlalchemy.func.count()).select_from(table)
        return int(connection.execute(query).scalar_one())


def poll_until(consumer: TrackedConsumer, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + CONSUME_DEADLINE_SECONDS
    while not condition():
        assert time.monotonic() < deadline, "the ledger did not catch up in time"
        consumer.poll_once(timeout_ms=200)


def test_a_ledger_that_crashed_mid_batch_rebuilds_identical_house_accounts_included(
    kafka_bootstrap_servers: str,
    unique_prefix: str,
    postgres_database_factory: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topics = Topics.with_prefix(unique_prefix)
    ensure_topics(kafka_bootstrap_servers, topics.all_names(), partitions=3)
    ledger_url = postgres_database_factory("ledger")
    migrate_ledger(ledger_url)
    engine = create_engine_for(ledger_url)
    grant_times = (GRANT_TIME + datetime.timedelta(seconds=index) for index in range(1_000))
    repository = LedgerRepository(EventStore(topics), clock=lambda: next(grant_times))
    group = unique_prefix + LEDGER_GROUP
    try:
        with transaction(create_session_factory(engine)) as session:
            for table in range(TABLES):
                for seat in "ab":
                    repository.ensure_starting_grant(session, f"player:t{table}{seat}", 5_000)
        relay_until_drained(engine, kafka_bootstrap_servers)
        for table in range(TABLES):
            produce_envelopes(
                kafka_bootstrap_servers, topics.settlement, settlement_stream(table), client_id="rebuild-test"
            )
        expected_transfers = TABLES * 2 + TABLES * 4

        def caught_up() -> bool:
            return (
                row_count(engine, ledger_transfers) == expected_transfers
                and row_count(engine, ledger_games) == TABLES
            )

        crashes_left = [1]

        def crash_in_the_middle_of_a_batch(position: MessagePosition) -> None:
            if position.offset == 2 and crashes_left:
                crashes_left.pop()
                raise _CrashedError

        def new_consumer(before_commit: Callable[[MessagePosition], None] | None = None) -> TrackedConsumer:
            return TrackedConsumer(
                engine,
                kafka_bootstrap_servers,
                group,
                [topics.settlement],
                None,
                topics.dead_letter,
                batch_handler=SettlementProjection(repository).handle_batch,
                before_commit=before_commit,
                # Small batches: the partitions' interleaving, not one big batch, decides the order.
                max_poll_records=4,
            )

        with new_consumer(crash_in_the_middle_of_a_batch) as doomed, pytest.raises(_CrashedError):
            poll_until(doomed, caught_up)
        with new_consumer() as restarted:
            poll_until(restarted, caught_up)
        relay_until_drained(engine, kafka_bootstrap_servers)
        with engine.connect() as connection:
            opened_at = connection.execute(
                sqlalchemy.select(ledger_accounts.c.opened_at).where(
                    ledger_accounts.c.account == "house:escape"
                )
            ).scalar_one()
    finally:
        engine.dispose()
    assert opened_at == game_time(TABLES - 1, 2)  # The earliest escape, whatever the reading order.

    monkeypatch.setenv("MAHJONG_KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap_servers)
    monkeypatch.setenv("MAHJONG_TOPIC_PREFIX", unique_prefix)
    monkeypatch.setenv("MAHJONG_LEDGER_DATABASE_URL", ledger_url)
    assert main(["rebuild", "ledger", "--live-group", group]) == 0
    output = capsys.readouterr().out
    assert "identical: the rebuilt ledger projection equals the live one" in output
    assert "0 failed in the handler" in output and "warning" not in output
