"""The stack floor benchmark (`python -m mahjong_bench.floor`): its arithmetic, and each
measurement run for real at a small size (gRPC and SQLite here; Kafka on the session's broker)."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from mahjong_bench import floor
from mahjong_infra.kafka import KafkaBroker


def _floors() -> tuple[floor.GrpcFloor, floor.KafkaFloor, floor.TransactionFloor]:
    return (
        floor.GrpcFloor(
            commands=1_000,
            streams=8,
            responses_per_command=2.5,
            seconds=1.0,
            server_cpu_seconds=0.3,
            client_cpu_seconds=0.4,
            calls=100,
            call_server_cpu_seconds=0.05,
            call_client_cpu_seconds=0.06,
        ),
        floor.KafkaFloor(
            records=2_000,
            consumed=1_000,
            relay_batch=20,
            seconds=2.0,
            producer_cpu_seconds=0.4,
            consumer_cpu_seconds=0.2,
            broker_cpu_seconds=0.6,
        ),
        floor.TransactionFloor(
            database="sqlite",
            transactions=100,
            commands_per_batch=10.0,
            rows_per_transaction=45,
            cpu_seconds=0.2,
        ),
    )


def test_each_unit_costs_its_cpu_over_its_count() -> None:
    costs = floor.unit_costs(*_floors())
    assert costs == pytest.approx(
        {
            "stream command served": 0.3 / 1_000,
            "stream command sent": 0.4 / 1_000,
            "call served": 0.05 / 100,
            "call made": 0.06 / 100,
            "record produced": 0.4 / 2_000,
            "record consumed": 0.2 / 1_000,  # over what the consumer's window read
            "record through the broker": 0.6 / 2_000,
            "transaction": 0.2 / 100,
        }
    )
    assert set(costs) == set(floor.UNITS)


def test_a_game_has_the_table_serve_the_commands_the_bots_send_and_the_table_commit_them() -> None:
    units = floor.GameCounts(commands=70.0, responses_per_command=2.5, commands_per_batch=10.0).units()
    assert units["table"]["stream command served"] == 70.0
    assert units["table"]["transaction"] == 7.0
    assert units["bots"]["stream command sent"] == 70.0
    # The broker carries in and out what is read (the ledger topic, read by nobody live, apart).
    produced = sum(counts.get("record produced", 0.0) for counts in units.values())
    consumed = sum(counts.get("record consumed", 0.0) for counts in units.values())
    assert units["kafka broker"]["record through the broker"] == pytest.approx(consumed)
    assert produced - consumed == pytest.approx(floor.UNITS_PER_GAME["ledger"]["record produced"])
    # Every call made is served: the bots' 12 and matchmaking's 4 GetBalance.
    served = sum(counts.get("call served", 0.0) for counts in units.values())
    made = sum(counts.get("call made", 0.0) for counts in units.values())
    assert served == made == 16
    assert floor.UNITS_PER_GAME["table"] == {
        "call served": 4,
        "record produced": 128.9,
        "record consumed": 5.0,
    }


def test_the_floor_of_a_process_is_its_units_times_their_costs() -> None:
    costs = {"call served": 0.001, "record produced": 0.0002, "transaction": 0.002}
    units = {"a": {"call served": 4, "record produced": 100.0}, "b": {"transaction": 5.0}}
    floors = floor.floor_by_process(units, costs)
    assert floors == pytest.approx({"a": 0.004 + 0.02, "b": 0.01, "everything": 0.034})


def test_a_broker_not_measured_costs_nothing() -> None:
    grpc_floor, kafka_floor, transaction_floor = _floors()
    remote = dataclasses.replace(kafka_floor, broker_cpu_seconds=None)
    assert floor.unit_costs(grpc_floor, remote, transaction_floor)["record through the broker"] == 0.0
    figures = floor.report(floor.GameCounts(), grpc_floor, remote, transaction_floor, engine_seconds=0.005)
    assert "| Kafka broker: a record in and out | not measured |" in floor.markdown(figures)


def test_the_ratio_budget_is_forty_engines_on_two_cores() -> None:
    # 0.05 of the engine's games/s with 2 CPU s a second: 2 / cpu = 0.05 / engine_cpu.
    assert floor.ratio_budget(0.005) == pytest.approx(0.2)
    assert floor.ratio_budget(0.005, ratio=0.1, cores=4) == pytest.approx(0.2)


def test_each_measured_process_is_set_against_its_floor() -> None:
    floors = {"table": 0.07, "bots": 0.02, "ledger": 0.005, "everything": 0.2}
    rows = floor.against_measured(floors, {"table": 0.2, "ledger": 0.03, "everything": 0.45, "other": 1.0})
    assert set(rows) == {"table", "ledger", "everything"}  # a process with no floor is not set against one
    assert rows["table"] == pytest.approx({"measured": 0.2, "floor": 0.07, "above": 0.13})
    assert rows["ledger"] == pytest.approx({"measured": 0.03, "floor": 0.005, "above": 0.025})
    assert rows["everything"] == pytest.approx({"measured": 0.45, "floor": 0.2, "above": 0.25})


def test_the_report_prints_every_unit_and_the_share_of_the_budget() -> None:
    figures = floor.report(floor.GameCounts(), *_floors(), engine_seconds=0.005, measured={"table": 0.2})
    text = floor.markdown(figures)
    for unit in ("gRPC server", "gRPC client", "Kafka producer", "Kafka consumer", "Kafka broker", "SQLite"):
        assert f"| {unit}" in text
    assert figures["floor_share_of_budget"] == pytest.approx(
        figures["floor_cpu_seconds_per_game"]["everything"] / 0.2
    )
    assert f"| floor ÷ budget | | | {figures['floor_share_of_budget']:.2f} |" in text
    assert f"| table | 0.2000 | {figures['floor_cpu_seconds_per_game']['table']:.4f} |" in text
    json.dumps(figures)  # what --json writes


def test_grpc_measures_both_processes_cpu_per_command_and_per_call() -> None:
    result = floor.measure_grpc(commands=400, streams=4, responses_per_command=2.5, calls=200, callers=4)
    # What the clients counted answered after their warm-up: every command and call asked for.
    assert (result.commands, result.calls) == (400, 200)
    # The server answers each command with 2 or 3 responses, 2.5 on average.
    assert result.responses_per_command == pytest.approx(2.5, abs=0.01)
    assert result.server_cpu_seconds > 0 and result.client_cpu_seconds > 0
    assert result.call_server_cpu_seconds > 0 and result.call_client_cpu_seconds > 0
    assert result.seconds > 0


def test_grpc_keeps_to_a_pace_when_asked() -> None:
    """At the system's pace a command costs more than flat out (fewer come together, each a
    wake-up of its own), so the floor goes at the pace it is given: 80 commands at 40 a second
    take about 2 s (flat out, a few hundredths), 40 calls at 20 a second as long."""
    result = floor.measure_grpc(
        commands=80, streams=4, calls=40, callers=4, commands_per_second=40.0, calls_per_second=20.0
    )
    assert (result.commands, result.calls) == (80, 40)  # after the warm-up's (2 a stream, 1 a caller)
    # At least the pace's time (its sleeps guarantee it, however loaded the box); no upper bound
    # on the wall clock, which a loaded machine can stretch: the exact spacing of the turns is
    # `test_a_pace_keeps_each_tasks_phase_and_a_late_task_waits_for_its_next_slot`'s, on a fake clock.
    assert result.seconds >= 0.75 * 80 / 40
    assert result.call_seconds >= 0.75 * 40 / 20


class _Clock:
    """A fake `time.monotonic` that `asyncio.sleep` (faked too) moves forward."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        assert seconds >= 0, seconds
        self.slept.append(self.now + seconds)
        self.now += seconds


def test_a_pace_keeps_each_tasks_phase_and_a_late_task_waits_for_its_next_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock()
    monkeypatch.setattr(floor.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(floor.asyncio, "sleep", clock.sleep)
    # 4 tasks at 40 a second: each every 0.1 s, task 1 at 0.025, 0.125, ... and task 2 at 0.05, ...
    first, second = floor._Pace(4, 40.0, 1), floor._Pace(4, 40.0, 2)

    async def turns() -> None:
        await first.turn()
        assert clock.now == pytest.approx(0.025)
        await first.turn()
        assert clock.now == pytest.approx(0.125)
        clock.now = 0.36  # both come late at the same moment (a barrier, a pause of the process)
        await first.turn()
        assert clock.now == pytest.approx(0.425)  # its next slot, not now: no burst, its phase kept
        clock.now = 0.36
        await second.turn()
        assert clock.now == pytest.approx(0.45)  # not together with the first
        await second.turn()
        assert clock.now == pytest.approx(0.55)

    asyncio.run(turns())


def test_without_a_pace_a_task_never_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(floor.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(floor.asyncio, "sleep", clock.sleep)
    pace = floor._Pace(4, None, 3)
    asyncio.run(pace.turn())
    assert clock.slept == [] and clock.now == 0.0


def test_the_grpc_floor_goes_at_a_measured_runs_pace_or_ten_games_a_second() -> None:
    run = {
        "games_settled_per_second": 5.0,
        "games": 256,
        "act_by_kind": {"all": {"count": 256 * 74.0}},
        "traffic_per_game": TRAFFIC,
    }
    calls = sum(counts["calls"] for counts in TRAFFIC.values())
    assert floor.grpc_pace(run, None, None) == (74.0 * 5.0, calls * 5.0)
    assert floor.grpc_pace(run, 100.0, 0.0) == (100.0, None)  # given; 0: as fast as they go
    assert floor.grpc_pace(None, None, None) == (10 * floor.COMMANDS_PER_GAME, 10 * 16.0)
    # A run kept before the services' counters: its commands, the constant calls a game.
    assert floor.grpc_pace({**run, "traffic_per_game": None}, None, None) == (370.0, 80.0)
    # No run: 10 games a second of the commands a game given.
    assert floor.grpc_pace(None, None, None, commands_per_game=80.0) == (800.0, 160.0)
    with pytest.raises(ValueError, match="a pace is a number"):
        floor.grpc_pace(None, -1.0, None)
    # 30 s of them at most as many as flat out, a multiple of the streams (or callers).
    assert floor.paced_count(370.0, 20_000, 128) == 11_008
    assert floor.paced_count(None, 20_000, 128) == 19_968
    assert floor.paced_count(1.0, 20_000, 128) == 128


def test_sqlite_writes_group_commit_batches() -> None:
    result = floor.measure_sqlite(transactions=20, commands_per_batch=10.0, events_per_command=2.0)
    assert (result.database, result.transactions) == ("sqlite", 20)
    assert result.rows_per_transaction == 10 + 2 * 20  # answers, events and their outbox rows
    assert result.cpu_seconds > 0 and result.server_cpu_seconds is None


@pytest.mark.integration
def test_postgresql_writes_group_commit_batches_and_counts_its_backend(postgres_database_url: str) -> None:
    conninfo = postgres_database_url.replace("postgresql+psycopg://", "postgresql://", 1)
    result = floor.measure_postgresql(
        conninfo, transactions=20, commands_per_batch=10.0, events_per_command=2.0
    )
    assert (result.database, result.transactions, result.rows_per_transaction) == ("postgresql", 20, 50)
    assert result.cpu_seconds > 0
    assert result.server_cpu_seconds is not None  # the session's cluster runs on this machine
    import psycopg

    with psycopg.connect(conninfo) as connection:  # its tables are dropped after
        tables = connection.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
    assert tables == (0,)


def test_a_postgresql_backends_cpu_is_shown_beside_the_floor_not_in_it() -> None:
    grpc_floor, kafka_floor, transaction_floor = _floors()
    postgresql = dataclasses.replace(transaction_floor, database="postgresql", server_cpu_seconds=0.1)
    sqlite_figures = floor.report(
        floor.GameCounts(), grpc_floor, kafka_floor, transaction_floor, engine_seconds=0.005
    )
    figures = floor.report(floor.GameCounts(), grpc_floor, kafka_floor, postgresql, engine_seconds=0.005)
    assert figures["floor_cpu_seconds_per_game"] == sqlite_figures["floor_cpu_seconds_per_game"]
    text = floor.markdown(figures)
    assert "| PostgreSQL, the client: a group commit of 10.0 commands (45 rows) | 2,000 |" in text
    assert "| PostgreSQL, its backend: the same (not in the floor" in text


@pytest.mark.integration
def test_kafka_measures_producer_consumer_and_broker(
    kafka_bootstrap_servers: str, kafka_broker: KafkaBroker, unique_prefix: str
) -> None:
    broker_pid = kafka_broker.running_pid()
    result = floor.measure_kafka(
        kafka_bootstrap_servers,
        broker_pid,
        records=400,
        relay_batch=20,
        records_per_second=2_000,
        topic_prefix=unique_prefix,
    )
    assert result.records == 400
    assert (
        0 < result.consumed <= 400
    )  # read in the consumer's window, which opens once it has read the warm-up
    assert result.producer_cpu_seconds > 0 and result.consumer_cpu_seconds > 0
    assert broker_pid is not None and result.broker_cpu_seconds is not None
    assert result.broker_cpu_seconds > 0


TRAFFIC = {
    "table": {"calls": 4.0, "records produced": 128.9, "records consumed": 5.0, "consumer batches": 1.0},
    "matchmaking": {"calls": 8.0, "records produced": 5.0, "records consumed": 1.0, "consumer batches": 1.0},
    "scoring": {"calls": 0.0, "records produced": 12.1, "records consumed": 127.9, "consumer batches": 9.0},
    "ledger": {"calls": 4.0, "records produced": 12.1, "records consumed": 12.1, "consumer batches": 4.0},
}


def test_a_measured_runs_counters_give_each_process_its_units() -> None:
    units = floor.GameCounts(commands=72.0, commands_per_batch=12.0).units(TRAFFIC)
    assert units["table"] == {
        "call served": 4.0,
        "record produced": 128.9,
        "record consumed": 5.0,
        "stream command served": 72.0,
        "transaction": 6.0,
    }
    assert units["matchmaking"] == {
        "call served": 8.0,
        "record produced": 5.0,
        "record consumed": 1.0,
        "call made": 4.0,  # the ledger's GetBalance calls
    }
    assert units["bots"] == {"call made": 12.0, "stream command sent": 72.0}  # the table's, matchmaking's
    assert units["kafka broker"] == {"record through the broker": pytest.approx(146.0)}
    # The constants are this table's counts from one measured run.
    constants = floor.GameCounts(commands=72.0, commands_per_batch=12.0).units()
    for process, counts in constants.items():
        counted = {unit: count for unit, count in units[process].items() if count}  # scoring serves no call
        assert counts == pytest.approx(counted), process


def test_the_kafka_floor_goes_at_a_measured_runs_pace_in_its_relay_rounds() -> None:
    counted = {**TRAFFIC["table"], "records produced": 127.1, "relay rounds": 4.4}
    run = {"games_settled_per_second": 3.86, "traffic_per_game": {**TRAFFIC, "table": counted}}
    assert floor.kafka_pace(run, None, None) == (29, pytest.approx(127.1 * 3.86))  # 127.1 / 4.4 = 28.9
    assert floor.kafka_pace(run, 10, 500.0) == (10, 500.0)  # given: as given
    # A run kept before the relay rounds counter: its pace, in the rounds the relay makes at it.
    assert floor.kafka_pace({"games_settled_per_second": 3.86, "traffic_per_game": TRAFFIC}, None, None) == (
        round(128.9 * 3.86 * 0.05),
        pytest.approx(128.9 * 3.86),
    )
    # None: the relay's rounds at 10 games a second.
    assert floor.kafka_pace(None, None, None) == (floor.RELAY_BATCH, floor.RECORDS_PER_SECOND)
    # 50 ms between the relay's rounds at 1,289 records a second.
    assert floor.RELAY_BATCH == 64


def test_a_measured_runs_units_are_reported_as_such() -> None:
    figures = floor.report(floor.GameCounts(), *_floors(), engine_seconds=0.005, traffic=TRAFFIC)
    assert figures["units_from"] == "the measured run's service counters"
    assert "| a game's units counted by | | | the measured run's service counters |" in floor.markdown(
        figures
    )


@pytest.mark.integration
def test_the_consumers_window_opens_when_every_record_is_there_at_once(
    kafka_bootstrap_servers: str, unique_prefix: str
) -> None:
    """A consumer that comes late (a busy box) finds the warm-up and every measured record waiting:
    its polls still stop at the warm-up's count, so its measured window opens and counts records."""
    import multiprocessing

    from kafka import KafkaProducer
    from mahjong_platform.topics import ensure_topics

    topic = f"{unique_prefix}late"
    ensure_topics(kafka_bootstrap_servers, [topic])
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap_servers)
    for n in range(60):
        producer.send(topic, key=str(n % 8).encode(), value=b"e" * 200)
    producer.flush()
    producer.close()
    received, sent = multiprocessing.Pipe(duplex=False)
    floor._kafka_consumer(kafka_bootstrap_servers, topic, (20, 40), sent)
    assert received.recv() == "ready"
    done, cpu, counted = received.recv()
    assert done == "done" and cpu >= 0
    assert 0 < counted <= 40
