"""Benchmark: the floor under `make bench-system`: what the required stack alone costs this box
for one game's traffic, with none of our code between the sockets.

    python -m mahjong_bench.floor [--commands 20000] [--records 10000] [--transactions 2000]
                                  [--measured BENCH_SYSTEM.json] [--bootstrap-servers HOST:PORT]
                                  [--json PATH]

Issue 10 asks the full system for at least 0.05 of the pure engine's rate. Two cores give
2 CPU seconds a second, so that is a budget of 40 × the pure engine's CPU per game for every
process together (the bots and the broker included). This measures, on this box and in the same
run, the units a game is made of, each through the same libraries and settings as the system but
with no work of ours around them:

- **gRPC** (`grpcio`'s `grpc.aio`, as the table and the bots): a server process with one
  bidirectional stream method passing bytes through, a client process holding `--streams` streams
  (the 128 seats of 32 tables) on one channel; each command is one request message answered by
  `--responses-per-command` response messages on average (2.54 in a 256-game saturation run:
  the answer and the seat updates). CPU per command of each process.
- **Kafka** (`kafka-python`, a local broker): a producer process built as the outbox relay's
  (`create_idempotent_producer`: idempotent, `acks=all`) sending in batches of `--relay-batch`
  records each followed by a flush and a wait for every acknowledgement (`OutboxRelay._publish`),
  at `--records-per-second` (default: 10 games a second's records, issue 10's rate), and a
  consumer process reading them as they come (the tracked consumer's fetch settings). CPU per
  record of the producer, the consumer and the broker.
- **SQLite** (the standard library's driver, WAL, `synchronous=FULL` as the table's store): a
  write transaction of a group-commit batch (`--commands-per-batch` commands: their events, their
  outbox rows, their answers, one multi-row INSERT each, then COMMIT). CPU per transaction.

The floor per game multiplies them by a game's counts (`--commands-per-game` ... defaults from a
saturation run of `bench_system`) and adds them up: a lower bound, since a game also has the
matchmaking and ledger calls, the other services' transactions and every line of our own code.
Compared with the budget, it says how much of the budget the stack leaves to everything else.

`--measured` takes a `python -m mjctl.bench_system --json` file and sets its saturation run's CPU
per game of each process against the part of the floor that process pays (the table: the gRPC
server, the producer and the transactions; the bots: the gRPC client; scoring: the consumer).

Prints Markdown tables; `--json PATH` writes the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import multiprocessing
import multiprocessing.connection
import os
import sqlite3
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# A game's counts: a 256-game saturation run of `python -m mjctl.bench_system --tables 32` on
# main b0abcdb (18,520 Acts, 2.54 Play responses per command), the table's Kafka sends counted
# by yappi over 64 games (8,253: its events and the seat releases), and its group commit's
# batches (8,610 commands in 760 batches on main c952eb6).
COMMANDS_PER_GAME = 72.3
RESPONSES_PER_COMMAND = 2.54
RECORDS_PER_GAME = 129.0
COMMANDS_PER_BATCH = 11.3
EVENTS_PER_COMMAND = 1.76

REQUEST_BYTES = 60
"""About an `ActRequest` (an idempotency key, an expected sequence and a command)."""
RESPONSE_BYTES = 400
"""About a `PlayResponse` with a mid-game view."""
RECORD_BYTES = 200
"""About a serialized table event envelope."""
STREAMS = 128
RELAY_BATCH = 20
"""Records a relay publishes at once at saturation: a batch of 11.3 commands' 1.76 events."""
KEYS = 32
"""Distinct message keys (tables)."""
WARM_UP_FRACTION = 0.1

_METHOD = "/floor.Floor/Play"
_LAST = b"\x01"
_MORE = b"\x00"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@dataclasses.dataclass(frozen=True)
class GrpcFloor:
    commands: int
    streams: int
    responses_per_command: float
    seconds: float
    server_cpu_seconds: float
    client_cpu_seconds: float

    @property
    def server_us_per_command(self) -> float:
        return 1e6 * self.server_cpu_seconds / self.commands

    @property
    def client_us_per_command(self) -> float:
        return 1e6 * self.client_cpu_seconds / self.commands


@dataclasses.dataclass(frozen=True)
class KafkaFloor:
    records: int
    relay_batch: int
    seconds: float
    producer_cpu_seconds: float
    consumer_cpu_seconds: float
    broker_cpu_seconds: float | None
    """None: the broker's process is not on this machine (`--bootstrap-servers` elsewhere)."""

    def us_per_record(self, cpu: float | None) -> float | None:
        return None if cpu is None else 1e6 * cpu / self.records


@dataclasses.dataclass(frozen=True)
class SqliteFloor:
    transactions: int
    commands_per_batch: float
    rows_per_transaction: int
    cpu_seconds: float

    @property
    def us_per_transaction(self) -> float:
        return 1e6 * self.cpu_seconds / self.transactions


@dataclasses.dataclass(frozen=True)
class GameCounts:
    commands: float = COMMANDS_PER_GAME
    responses_per_command: float = RESPONSES_PER_COMMAND
    records: float = RECORDS_PER_GAME
    commands_per_batch: float = COMMANDS_PER_BATCH

    @property
    def transactions(self) -> float:
        return self.commands / self.commands_per_batch


def floor_per_game(
    counts: GameCounts, grpc_floor: GrpcFloor, kafka_floor: KafkaFloor, sqlite_floor: SqliteFloor
) -> dict[str, float]:
    """CPU seconds per game of each unit (the counts times the measured costs), and their sum.
    A broker not measured counts 0 (the floor is then lower still)."""
    parts = {
        "grpc server": counts.commands * grpc_floor.server_cpu_seconds / grpc_floor.commands,
        "grpc client": counts.commands * grpc_floor.client_cpu_seconds / grpc_floor.commands,
        "kafka producer": counts.records * kafka_floor.producer_cpu_seconds / kafka_floor.records,
        "kafka consumer": counts.records * kafka_floor.consumer_cpu_seconds / kafka_floor.records,
        "kafka broker": counts.records * (kafka_floor.broker_cpu_seconds or 0.0) / kafka_floor.records,
        "sqlite": counts.transactions * sqlite_floor.cpu_seconds / sqlite_floor.transactions,
    }
    return {**parts, "floor": sum(parts.values())}


FLOOR_PARTS_OF_PROCESS = {
    "table": ("grpc server", "kafka producer", "sqlite"),
    "bots": ("grpc client",),
    "kafka broker": ("kafka broker",),
    "scoring": ("kafka consumer",),
    "matchmaking": (),
    "ledger": (),
    "everything": ("floor",),
}
"""Which units of the floor each process of `bench_system` pays (the table serves the streams,
publishes the events and writes the batches; the bots are the clients; scoring reads the events;
matchmaking's and the ledger's traffic is not in the floor)."""


def against_measured(per_game: dict[str, float], measured: dict[str, float]) -> dict[str, dict[str, float]]:
    """For each process of a `bench_system` run (its `cpu_seconds_per_game`), its floor and what
    it spent above it."""
    rows = {}
    for process, parts in FLOOR_PARTS_OF_PROCESS.items():
        if process not in measured:
            continue
        floor = sum(per_game[part] for part in parts)
        rows[process] = {"measured": measured[process], "floor": floor, "above": measured[process] - floor}
    return rows


def ratio_budget(engine_cpu_seconds_per_game: float, ratio: float = 0.05, cores: int = 2) -> float:
    """CPU seconds per game everything may take for the full system to make `ratio` of the pure
    engine's games per second on `cores` cores: games/s = cores / cpu, engine = 1 / engine cpu."""
    return cores / ratio * engine_cpu_seconds_per_game


def _receive(
    connection: Connection, process: multiprocessing.process.BaseProcess, seconds: float, what: str
) -> Any:
    """The next message a child process sends, or RuntimeError naming `what` when it exits first
    or `seconds` pass."""
    ready = multiprocessing.connection.wait([connection, process.sentinel], seconds)
    if connection in ready:
        return connection.recv()
    process.join(1)
    state = (
        f"exited with {process.exitcode}"
        if process.exitcode is not None
        else f"still running after {seconds:.0f} s"
    )
    raise RuntimeError(f"{what}: the child process {state}")


# gRPC --------------------------------------------------------------------------------------------


def _grpc_server(port_out: Connection, response_bytes: int, responses_per_command: float) -> None:
    import grpc

    payload_more = _MORE + b"v" * (response_bytes - 1)
    payload_last = _LAST + b"v" * (response_bytes - 1)

    async def play(requests: AsyncIterator[bytes], _context: Any) -> AsyncIterator[bytes]:
        owed = 0.0
        async for _request in requests:
            owed += responses_per_command
            count = max(1, int(owed))
            owed -= count
            for _ in range(count - 1):
                yield payload_more
            yield payload_last

    async def serve() -> None:
        server = grpc.aio.server()
        handler = grpc.stream_stream_rpc_method_handler(play)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("floor.Floor", {"Play": handler}),)
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        port_out.send(port)
        await server.wait_for_termination()

    asyncio.run(serve())


def _grpc_client(port: int, streams: int, commands: int, request_bytes: int, phases: Connection) -> None:
    import grpc

    request = b"r" * request_bytes
    per_stream = commands // streams
    warm_up = max(1, int(per_stream * WARM_UP_FRACTION))

    async def run() -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            play = channel.stream_stream(_METHOD)
            warmed = asyncio.Barrier(streams + 1)

            async def seat() -> None:
                call = play()
                for sent in range(warm_up + per_stream):
                    if sent == warm_up:
                        await warmed.wait()
                    await call.write(request)
                    while (await call.read())[:1] != _LAST:
                        pass
                await call.done_writing()
                await call.code()

            seats = [asyncio.create_task(seat()) for _ in range(streams)]
            await warmed.wait()
            phases.send("measuring")
            await asyncio.gather(*seats)
            phases.send("done")

    asyncio.run(run())


def measure_grpc(
    commands: int = 20_000,
    streams: int = STREAMS,
    responses_per_command: float = RESPONSES_PER_COMMAND,
    request_bytes: int = REQUEST_BYTES,
    response_bytes: int = RESPONSE_BYTES,
) -> GrpcFloor:
    """`commands` commands over `streams` streams, server and client each a process of its own."""
    assert streams >= 1 and commands >= streams and responses_per_command >= 1
    context = multiprocessing.get_context("spawn")  # no fork: gRPC's threads do not survive one
    port_in, port_out = context.Pipe(duplex=False)
    server = context.Process(
        target=_grpc_server, args=(port_out, response_bytes, responses_per_command), daemon=True
    )
    server.start()
    client: multiprocessing.process.BaseProcess | None = None
    try:
        port = _receive(port_in, server, 60, "the gRPC floor server did not start")
        phases_in, phases_out = context.Pipe(duplex=False)
        measured = (commands // streams) * streams
        client = context.Process(
            target=_grpc_client, args=(port, streams, commands, request_bytes, phases_out), daemon=True
        )
        client.start()
        _receive(phases_in, client, 120, "the gRPC floor client did not warm up")
        assert server.pid is not None and client.pid is not None
        started = time.perf_counter()
        server_before, client_before = cpu_seconds(server.pid), cpu_seconds(client.pid)
        _receive(phases_in, client, 600, "the gRPC floor client did not finish")
        server_after, client_after = cpu_seconds(server.pid), cpu_seconds(client.pid)
        seconds = time.perf_counter() - started
        client.join(30)
        if client.exitcode != 0:
            raise RuntimeError(f"the gRPC floor client exited with {client.exitcode}")
        return GrpcFloor(
            commands=measured,
            streams=streams,
            responses_per_command=responses_per_command,
            seconds=seconds,
            server_cpu_seconds=server_after - server_before,
            client_cpu_seconds=client_after - client_before,
        )
    finally:
        for process in (client, server):
            if process is not None and process.is_alive():
                process.terminate()
                process.join(10)


# Kafka -------------------------------------------------------------------------------------------


def _kafka_producer(
    bootstrap_servers: str,
    topic: str,
    counts: tuple[int, int],
    relay_batch: int,
    record_bytes: int,
    records_per_second: float,
    phases: Connection,
) -> None:
    from mahjong_platform.outbox import create_idempotent_producer

    warm_up, records = counts
    producer = create_idempotent_producer(
        bootstrap_servers, client_id="floor-producer", delivery_timeout_ms=60_000
    )
    keys = [str(uuid.uuid4()).encode() for _ in range(KEYS)]
    value = b"e" * record_bytes

    def publish(first: int, count: int) -> None:
        futures = [producer.send(topic, key=keys[(first + n) % KEYS], value=value) for n in range(count)]
        producer.flush(timeout=60)
        for future in futures:
            future.get(timeout=60)

    def paced(first: int, last: int) -> None:
        started = time.monotonic()
        for batch_first in range(first, last, relay_batch):
            due = started + (batch_first - first) / records_per_second
            if (wait := due - time.monotonic()) > 0:
                time.sleep(wait)
            publish(batch_first, min(relay_batch, last - batch_first))

    paced(0, warm_up)
    phases.send("measuring")
    before = time.process_time()
    paced(warm_up, warm_up + records)
    phases.send(("done", time.process_time() - before))
    producer.close(timeout=30)


def _kafka_consumer(bootstrap_servers: str, topic: str, counts: tuple[int, int], phases: Connection) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from mahjong_platform.tracked_consumer import FETCH_MAX_WAIT_MS

    warm_up, records = counts
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        client_id="floor-consumer",
        enable_auto_commit=False,
        fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
        fetch_min_bytes=1,
        metrics_enabled=False,
    )
    partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    phases.send("ready")
    read = 0
    before: float | None = None
    while read < warm_up + records:
        if before is None and read >= warm_up:
            before = time.process_time()
        for batch in consumer.poll(timeout_ms=1_000, max_records=500).values():
            read += len(batch)
    assert before is not None
    phases.send(("done", time.process_time() - before))
    consumer.close()


def measure_kafka(
    bootstrap_servers: str,
    broker_pid: int | None,
    records: int = 10_000,
    relay_batch: int = RELAY_BATCH,
    record_bytes: int = RECORD_BYTES,
    records_per_second: float = 10 * RECORDS_PER_GAME,
    topic_prefix: str = "",
) -> KafkaFloor:
    """`records` records through a new topic (the system's partition count): a producer process
    publishing `records_per_second` in relay batches while a consumer process reads them as they
    come; the broker's CPU over the same time when `broker_pid` is given. Each process's CPU is
    counted after a warm-up of a tenth as many records."""
    from mahjong_platform.topics import ensure_topics

    assert records >= relay_batch >= 1 and records_per_second > 0
    topic = f"{topic_prefix}floor.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap_servers, [topic])
    counts = (max(relay_batch, int(records * WARM_UP_FRACTION)), records)
    context = multiprocessing.get_context("spawn")
    consumer_phases, consumer_phases_out = context.Pipe(duplex=False)
    producer_phases, producer_phases_out = context.Pipe(duplex=False)
    consumer = context.Process(
        target=_kafka_consumer, args=(bootstrap_servers, topic, counts, consumer_phases_out), daemon=True
    )
    producer = context.Process(
        target=_kafka_producer,
        args=(
            bootstrap_servers,
            topic,
            counts,
            relay_batch,
            record_bytes,
            records_per_second,
            producer_phases_out,
        ),
        daemon=True,
    )
    consumer.start()
    try:
        _receive(consumer_phases, consumer, 120, "the Kafka floor consumer did not start")
        producer.start()
        _receive(producer_phases, producer, 120, "the Kafka floor producer did not warm up")
        broker_before = cpu_seconds(broker_pid) if broker_pid is not None else None
        started = time.perf_counter()
        timeout = 120 + 2 * records / records_per_second
        _done, producer_cpu = _receive(
            producer_phases, producer, timeout, "the Kafka floor producer did not finish"
        )
        _done, consumer_cpu = _receive(
            consumer_phases, consumer, 120, "the Kafka floor consumer did not finish"
        )
        seconds = time.perf_counter() - started
        broker_cpu = None
        if broker_pid is not None and broker_before is not None:
            broker_cpu = cpu_seconds(broker_pid) - broker_before
        return KafkaFloor(
            records=records,
            relay_batch=relay_batch,
            seconds=seconds,
            producer_cpu_seconds=producer_cpu,
            consumer_cpu_seconds=consumer_cpu,
            broker_cpu_seconds=broker_cpu,
        )
    finally:
        for process in (producer, consumer):
            if process.pid is not None:
                process.join(30)
                if process.is_alive():
                    process.terminate()
                    process.join(10)


# SQLite ------------------------------------------------------------------------------------------

_SCHEMA = (
    "CREATE TABLE events (stream_id TEXT NOT NULL, sequence INTEGER NOT NULL, event_id TEXT NOT NULL"
    " UNIQUE, occurred_at TEXT NOT NULL, payload BLOB NOT NULL, PRIMARY KEY (stream_id, sequence))",
    "CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, message_key TEXT"
    " NOT NULL, message_value BLOB NOT NULL, event_id TEXT NOT NULL, sent_at TEXT, UNIQUE (topic, event_id))",
    "CREATE TABLE answers (idempotency_key TEXT PRIMARY KEY, body BLOB NOT NULL)",
)


def _rows_statement(table: str, columns: int, rows: int) -> str:
    row = "(" + ", ".join("?" * columns) + ")"
    return f"INSERT INTO {table} VALUES " + ", ".join([row] * rows)


def measure_sqlite(
    transactions: int = 2_000,
    commands_per_batch: float = COMMANDS_PER_BATCH,
    events_per_command: float = EVENTS_PER_COMMAND,
    record_bytes: int = RECORD_BYTES,
) -> SqliteFloor:
    """`transactions` group-commit batches written through the bare driver, as the table's store
    is set up (WAL, `synchronous=FULL`): BEGIN IMMEDIATE, one multi-row INSERT each of the
    batch's events, outbox rows and answers, COMMIT. CPU of this process (SQLite runs in it)."""
    assert transactions >= 1 and commands_per_batch >= 1 and events_per_command >= 0
    with tempfile.TemporaryDirectory(prefix="mahjong-floor-") as folder:
        connection = sqlite3.connect(Path(folder) / "floor.sqlite3", isolation_level=None)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
            for statement in _SCHEMA:
                connection.execute(statement)
            payload = b"e" * record_bytes
            answer = b"a" * 40
            streams = [str(uuid.uuid4()) for _ in range(KEYS)]
            sequences = dict.fromkeys(streams, 0)
            owed_commands = owed_events = 0.0
            batches: list[tuple[int, int, list[object], list[object], list[object]]] = []
            warm_up = max(1, int(transactions * WARM_UP_FRACTION))
            for number in range(warm_up + transactions):  # the rows first: only SQLite is timed
                owed_commands += commands_per_batch
                commands = int(owed_commands)
                owed_commands -= commands
                owed_events += commands * events_per_command
                events = int(owed_events)
                owed_events -= events
                event_rows: list[object] = []
                outbox_rows: list[object] = []
                for n in range(events):
                    stream = streams[(number + n) % KEYS]
                    sequences[stream] += 1
                    event_id = str(uuid.uuid4())
                    event_rows += (stream, sequences[stream], event_id, "2026-12-07T00:00:00", payload)
                    outbox_rows += (None, "mahjong.table.v1", stream, payload, event_id, None)
                answer_rows: list[object] = []
                for _ in range(commands):
                    answer_rows += (str(uuid.uuid4()), answer)
                batches.append((commands, events, event_rows, outbox_rows, answer_rows))
            statements = {
                (commands, events): (
                    _rows_statement("events", 5, events),
                    _rows_statement("outbox", 6, events),
                    _rows_statement("answers", 2, commands),
                )
                for commands, events, *_rows in batches
            }
            rows = 0
            before = 0.0
            for number, (commands, events, event_rows, outbox_rows, answer_rows) in enumerate(batches):
                if number == warm_up:
                    before, rows = time.process_time(), 0
                insert_events, insert_outbox, insert_answers = statements[commands, events]
                connection.execute("BEGIN IMMEDIATE")
                if events:
                    connection.execute(insert_events, event_rows)
                    connection.execute(insert_outbox, outbox_rows)
                connection.execute(insert_answers, answer_rows)
                connection.execute("COMMIT")
                rows += 2 * events + commands
            cpu = time.process_time() - before
        finally:
            connection.close()
    return SqliteFloor(
        transactions=transactions,
        commands_per_batch=commands_per_batch,
        rows_per_transaction=round(rows / transactions),
        cpu_seconds=cpu,
    )


# The whole -----------------------------------------------------------------------------------------


def engine_cpu_seconds_per_game(games: int = 200) -> float:
    """The pure engine's CPU seconds per game in this run (`mahjong_table.bench`, Sichuan)."""
    from mahjong_table.bench import run

    result = run(games)
    return result["cpu_seconds"] / result["games"]


@contextmanager
def _broker(bootstrap_servers: str | None) -> Iterator[tuple[str, int | None]]:
    """The given broker (its process unknown), or a local one on free ports, stopped after."""
    if bootstrap_servers:
        yield bootstrap_servers, None
        return
    from mahjong_infra import kafka

    kafka.fetch()
    with tempfile.TemporaryDirectory(prefix="mahjong-floor-kafka-") as folder:
        broker = kafka.KafkaBroker.on_free_ports(Path(folder) / "kafka")
        broker.start(die_with_parent=True)
        try:
            yield broker.bootstrap_servers, broker.running_pid()
        finally:
            broker.stop()


def report(
    counts: GameCounts,
    grpc_floor: GrpcFloor,
    kafka_floor: KafkaFloor,
    sqlite_floor: SqliteFloor,
    engine_cpu_per_game: float,
    measured: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Every figure of a run, for `--json` and for the table; `measured`: a `bench_system` run's
    CPU seconds per game by process, set against the floor."""
    per_game = floor_per_game(counts, grpc_floor, kafka_floor, sqlite_floor)
    budget = ratio_budget(engine_cpu_per_game)
    return {
        "measured": against_measured(per_game, measured) if measured else {},
        "counts": dataclasses.asdict(counts),
        "grpc": dataclasses.asdict(grpc_floor),
        "kafka": dataclasses.asdict(kafka_floor),
        "sqlite": dataclasses.asdict(sqlite_floor),
        "cpu_seconds_per_game": per_game,
        "engine_cpu_seconds_per_game": engine_cpu_per_game,
        "ratio_budget_cpu_seconds_per_game": budget,
        "floor_share_of_budget": per_game["floor"] / budget,
        "load_average": list(os.getloadavg()),
    }


def markdown(figures: dict[str, Any]) -> str:
    counts, grpc_floor, kafka_floor = figures["counts"], figures["grpc"], figures["kafka"]
    sqlite_floor, per_game = figures["sqlite"], figures["cpu_seconds_per_game"]

    def us(cpu: float | None, units: int) -> str:
        return "not measured" if cpu is None else f"{1e6 * cpu / units:,.0f}"

    commands, records = grpc_floor["commands"], kafka_floor["records"]
    lines = [
        "| unit (CPU of each process, µs) | per unit | units a game | CPU s / game |",
        "|---|---:|---:|---:|",
        f"| gRPC server: a command in, {grpc_floor['responses_per_command']:.2f} responses out"
        f" ({grpc_floor['streams']} streams) | {us(grpc_floor['server_cpu_seconds'], commands)}"
        f" | {counts['commands']:.1f} | {per_game['grpc server']:.4f} |",
        f"| gRPC client: the same, the other end | {us(grpc_floor['client_cpu_seconds'], commands)}"
        f" | {counts['commands']:.1f} | {per_game['grpc client']:.4f} |",
        f"| Kafka producer: a record, published {kafka_floor['relay_batch']} at a time with a flush"
        f" | {us(kafka_floor['producer_cpu_seconds'], records)} | {counts['records']:.0f}"
        f" | {per_game['kafka producer']:.4f} |",
        f"| Kafka consumer: a record, read as it comes | {us(kafka_floor['consumer_cpu_seconds'], records)}"
        f" | {counts['records']:.0f} | {per_game['kafka consumer']:.4f} |",
        f"| Kafka broker: a record in and out | {us(kafka_floor['broker_cpu_seconds'], records)}"
        f" | {counts['records']:.0f} | {per_game['kafka broker']:.4f} |",
        f"| SQLite: a group-commit transaction of {sqlite_floor['commands_per_batch']:.1f} commands"
        f" ({sqlite_floor['rows_per_transaction']} rows)"
        f" | {us(sqlite_floor['cpu_seconds'], sqlite_floor['transactions'])}"
        f" | {counts['commands'] / counts['commands_per_batch']:.1f} | {per_game['sqlite']:.4f} |",
        f"| **the stack's floor, a game** | | | **{per_game['floor']:.4f}** |",
        f"| pure engine, a game (same run) | | | {figures['engine_cpu_seconds_per_game']:.4f} |",
        f"| issue 10's ratio budget (0.05 of the engine on 2 cores = 40 × the engine) | | |"
        f" {figures['ratio_budget_cpu_seconds_per_game']:.4f} |",
        f"| floor ÷ budget | | | {figures['floor_share_of_budget']:.2f} |",
        "| load average (1/5/15 min) | | | " + " ".join(f"{x:.2f}" for x in figures["load_average"]) + " |",
    ]
    if figures["measured"]:
        lines += [
            "",
            "| process (CPU s / game) | measured (bench_system) | the stack's floor | above the floor |",
            "|---|---:|---:|---:|",
        ]
        for process, row in figures["measured"].items():
            lines.append(f"| {process} | {row['measured']:.4f} | {row['floor']:.4f} | {row['above']:.4f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--commands", type=int, default=20_000, help="gRPC commands measured (default 20000)")
    parser.add_argument("--streams", type=int, default=STREAMS, help=f"gRPC streams (default {STREAMS})")
    parser.add_argument("--records", type=int, default=10_000, help="Kafka records measured (default 10000)")
    parser.add_argument("--relay-batch", type=int, default=RELAY_BATCH, help="records a publish (default 20)")
    parser.add_argument(
        "--records-per-second",
        type=float,
        default=10 * RECORDS_PER_GAME,
        help="the producer's pace (default: 10 games a second's records)",
    )
    parser.add_argument("--transactions", type=int, default=2_000, help="SQLite transactions (default 2000)")
    parser.add_argument("--engine-games", type=int, default=200, help="pure engine games (default 200)")
    parser.add_argument("--commands-per-game", type=float, default=COMMANDS_PER_GAME)
    parser.add_argument("--responses-per-command", type=float, default=RESPONSES_PER_COMMAND)
    parser.add_argument("--records-per-game", type=float, default=RECORDS_PER_GAME)
    parser.add_argument("--commands-per-batch", type=float, default=COMMANDS_PER_BATCH)
    parser.add_argument("--bootstrap-servers", help="an existing broker (default: start one on free ports)")
    parser.add_argument(
        "--measured",
        type=Path,
        help="a `python -m mjctl.bench_system --json` file: set its saturation run's CPU per game"
        " by process against the floor (and take its commands and responses per command)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    arguments = parser.parse_args(argv)
    measured: dict[str, float] | None = None
    if arguments.measured is not None:
        run = json.loads(arguments.measured.read_text())["saturation"]
        measured = run["cpu_seconds_per_game"]
        arguments.commands_per_game = run["act_by_kind"]["all"]["count"] / run["games"]
        arguments.responses_per_command = run["responses_per_command"]
    counts = GameCounts(
        commands=arguments.commands_per_game,
        responses_per_command=arguments.responses_per_command,
        records=arguments.records_per_game,
        commands_per_batch=arguments.commands_per_batch,
    )
    engine = engine_cpu_seconds_per_game(arguments.engine_games)
    grpc_floor = measure_grpc(arguments.commands, arguments.streams, counts.responses_per_command)
    with _broker(arguments.bootstrap_servers) as (bootstrap_servers, broker_pid):
        kafka_floor = measure_kafka(
            bootstrap_servers,
            broker_pid,
            arguments.records,
            arguments.relay_batch,
            records_per_second=arguments.records_per_second,
        )
    sqlite_floor = measure_sqlite(arguments.transactions, counts.commands_per_batch)
    figures = report(counts, grpc_floor, kafka_floor, sqlite_floor, engine, measured)
    print(markdown(figures))
    if arguments.json is not None:
        arguments.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
