"""Benchmark: the floor under `make bench-system`: what the required stack alone costs this box
for one game's traffic, with none of our code between the sockets.

    python -m mahjong_bench.floor [--commands-per-second N] [--calls-per-second N]
                                  [--records 10000] [--relay-batch N] [--records-per-second N]
                                  [--transactions 2000] [--database sqlite|postgresql]
                                  [--measured BENCH_SYSTEM.json]
                                  [--bootstrap-servers HOST:PORT] [--json PATH]

Issue 10 asks the full system for at least 0.05 of the pure engine's rate (games a second, as
`bench_system` divides them). Two cores give 2 CPU seconds a second, so that is a budget of 40 × the
pure engine's seconds per game, in CPU seconds per game for every process together (the bots and
the broker included). This measures, on this box and in the same
run, the units a game is made of, each through the same libraries and settings as the system but
with no work of ours around them:

- **gRPC** (`grpcio`'s `grpc.aio`, as the services and the bots; the client with the bot
  processes' `GRPC_EXPERIMENTS`): a server process with a bidirectional stream method passing
  bytes through and a unary method; a client process holding `--streams` streams (the 128 seats of
  32 tables) on one channel, each command one request message answered by
  `--responses-per-command` response messages on average (2.54 in a 256-game saturation run: the
  answer and the seat updates); then a client process making `--calls` unary calls, 16 at once (a
  game's Enqueue, WatchTicket, Play opens and GetBalance calls). CPU per command and per call of
  each process. Both go at a pace (`--commands-per-second`, `--calls-per-second`; default: the
  `--measured` run's, else issue 10's 10 games a second's), because a command costs more the
  fewer come together: each is a wake-up of both processes of its own. 2026-12-08 02:54 UTC on this
  box (`measure_grpc` with 128 streams, 2.5 responses a command, load 0.3-1.6): server / client
  614 / 663 us a command at 330 a second (a 256-game saturation run's pace at 4-5 games a second),
  448 / 459 at 900, 291 / 253 at 3,459, 248 / 217 flat out (4,146 a second); the floor's first
  version (2026-12-07) went flat out.
- **Kafka** (`kafka-python`, a local broker): a producer process built as the outbox relay's
  (`create_idempotent_producer`: idempotent, `acks=all`) sending in batches of `--relay-batch`
  records each followed by a flush and a wait for every acknowledgement (`OutboxRelay._publish`),
  at `--records-per-second` (default: the table's records at issue 10's 10 games a second, in the
  rounds the relay makes at that pace, `RELAY_BATCH`), and a
  consumer process reading them as they come (the tracked consumer's fetch settings). CPU per
  record of the producer, the consumer and the broker.
- **SQLite** (the standard library's driver, WAL, `synchronous=FULL` as the table's store): a
  write transaction of a group-commit batch (`--commands-per-batch` commands: their events, their
  outbox rows, their answers, one multi-row INSERT each, then COMMIT). CPU per transaction.
  `--database postgresql`: the same through psycopg into a throwaway cluster (fsync off, as
  `bench_system`'s); the client's CPU is the unit, its backend's is shown beside the floor (the
  `bench_system` figures count no server's CPU).

The floor of each process is the units it handles a game (`UNITS_PER_GAME`, the Play commands
and the group commits: a game's counts measured from the system) times their costs; their sum is
the floor of the whole system: a lower bound, since a game also has the other services'
transactions, the bots' decisions and every line of our own code. Set against the budget, it says
how much of the budget the stack leaves to everything else.

`--measured` takes a `python -m mjctl.bench_system --json` file and sets its saturation run's CPU
per game of each process against that process's floor, the units then counted in that run (its
services' counters of calls, records and batches) instead of `UNITS_PER_GAME`, and the Kafka floor
at that run's pace and its table relay's records a round.

Prints Markdown tables; `--json PATH` writes the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import sqlite3
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from mahjong_platform.outbox import ROUND_INTERVAL_MS_DEFAULT
from mjctl.bench_system import cpu_seconds

# A game's counts. Commands and responses: a 256-game saturation run of `python -m
# mjctl.bench_system --tables 32` on main b0abcdb (18,520 Acts, 2.54 Play responses per command);
# batches: the table's group commit at saturation (8,610 commands in 760 batches, main c952eb6).
COMMANDS_PER_GAME = 72.3
RESPONSES_PER_COMMAND = 2.54
COMMANDS_PER_BATCH = 11.3
EVENTS_PER_COMMAND = 1.76
# Records a game puts on each topic: the topics' end offsets before and after `mjctl bots
# --players 32 --games 32` against `mjctl run` (2026-12-07): mahjong.table.v1 127.9 (the table's
# events; scoring reads them), mahjong.seats.v1 1.0 (the table's; matchmaking reads it),
# mahjong.match.v1 5.0 (matchmaking's; the table reads the openings), mahjong.settlement.v1 12.1
# (scoring's; the ledger reads it), mahjong.ledger.v1 12.1 (the ledger's; nobody reads it live).
# The broker carries each read record in and out (146.0; the ledger topic's 12.1, written and not
# read live, are left out). Calls a game: each bot's Enqueue, WatchTicket and Play (12, the Play
# streams' commands apart), each Enqueue's GetBalance from matchmaking to the ledger (4).
UNITS_PER_GAME: dict[str, dict[str, float]] = {
    "table": {"call served": 4, "record produced": 128.9, "record consumed": 5.0},
    "bots": {"call made": 12},
    "matchmaking": {"call served": 8, "call made": 4, "record produced": 5.0, "record consumed": 1.0},
    "scoring": {"record produced": 12.1, "record consumed": 127.9},
    "ledger": {"call served": 4, "record produced": 12.1, "record consumed": 12.1},
    "kafka broker": {"record through the broker": 146.0},
}
"""What each process of `bench_system` does a game, in the floor's units, besides the Play
streams' commands (the table serves them, the bots send them) and the table's group-commit
transactions, which depend on the run (`GameCounts`). Left out, so the floor stays a lower
bound: the other services' transactions, the bots' decisions, and everything of ours."""

RECORDS_PER_SECOND = 10 * UNITS_PER_GAME["table"]["record produced"]
"""The producer's pace: the table's records at issue 10's 10 games a second."""
REQUEST_BYTES = 60
"""About an `ActRequest` (an idempotency key, an expected sequence and a command)."""
RESPONSE_BYTES = 400
"""About a `PlayResponse` with a mid-game view."""
RECORD_BYTES = 200
"""About a serialized table event envelope."""
STREAMS = 128
CALLERS = 16
"""Calls in flight at once (the bots' Enqueue and WatchTicket calls between games)."""
CALL_RESPONSE_BYTES = 100


def relay_batch_at(records_per_second: float) -> int:
    """The records of a relay round at `records_per_second`: its rounds start at least
    `ROUND_INTERVAL_MS_DEFAULT` apart, so at least that long's records (at least 1)."""
    return max(1, round(records_per_second * ROUND_INTERVAL_MS_DEFAULT / 1000))


RELAY_BATCH = relay_batch_at(RECORDS_PER_SECOND)
"""Records a relay round publishes at `RECORDS_PER_SECOND` (64): the relay's rounds start at least
`ROUND_INTERVAL_MS_DEFAULT` (50 ms) apart (`OutboxRelay.run_forever`), so a round carries at least
that long's records. Kafka's cost is mostly per round (at 1,290 records a second, 20 records a
round cost the producer, consumer and broker about 190, 150 and 165 us a record, 100 a round 74,
46 and 52: 2026-12-08, this box), so the batch matters as much as the count. A 256-game saturation
run at 3.86 games a second made 4.4 table relay rounds a game, 29 records each (`bench_system`'s
"relay rounds"); `--measured` takes the run's own. In the runs of 2026-12-08 a round began every
57-63 ms (the 50 ms and the round's own publish), so at this pace a round would carry about 75:
64 makes a record's cost a little higher than the relay's (102 us for the producer at 64, 74 at
100), the one place where the floor leans high."""
KEYS = 32
"""Distinct message keys (tables)."""
WARM_UP_FRACTION = 0.1

_PLAY = "/floor.Floor/Play"
_CALL = "/floor.Floor/Call"
_LAST = b"\x01"
_MORE = b"\x00"


@dataclasses.dataclass(frozen=True)
class GrpcFloor:
    commands: int
    streams: int
    responses_per_command: float
    seconds: float
    server_cpu_seconds: float
    client_cpu_seconds: float
    calls: int
    """Unary calls, each a new call on the channel (how a game's Enqueue, GetBalance, WatchTicket
    and Play opens are counted)."""
    call_server_cpu_seconds: float
    call_client_cpu_seconds: float
    commands_per_second: float | None = None
    """The pace the stream client kept to (None: as fast as it could); `commands / seconds` is the
    pace it made."""
    calls_per_second: float | None = None
    """The pace of the unary calls (None: as fast as they could go)."""
    call_seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class KafkaFloor:
    records: int
    """Records published in the measured phase (the producer's and the broker's CPU)."""
    consumed: int
    """Records read in the consumer's measured phase (its CPU)."""
    relay_batch: int
    seconds: float
    producer_cpu_seconds: float
    consumer_cpu_seconds: float
    broker_cpu_seconds: float | None
    """None: the broker's process is not on this machine (`--bootstrap-servers` elsewhere)."""
    records_per_second: float | None = None
    """The producer's pace (`records / seconds` is the pace it made)."""


@dataclasses.dataclass(frozen=True)
class TransactionFloor:
    database: str
    """"sqlite" or "postgresql"."""
    transactions: int
    commands_per_batch: float
    rows_per_transaction: int
    cpu_seconds: float
    """The writing process's (the table's): SQLite runs in it; with PostgreSQL the client's part."""
    server_cpu_seconds: float | None = None
    """PostgreSQL: its backend's, a process `bench_system`'s CPU figures do not count."""


@dataclasses.dataclass(frozen=True)
class GameCounts:
    commands: float = COMMANDS_PER_GAME
    responses_per_command: float = RESPONSES_PER_COMMAND
    commands_per_batch: float = COMMANDS_PER_BATCH

    def units(self, traffic: dict[str, dict[str, float]] | None = None) -> dict[str, dict[str, float]]:
        """Each process's units a game: `UNITS_PER_GAME`, or those of a run's counters
        (`units_of_traffic`), with the Play commands and the table's transactions."""
        if traffic is None:
            units = {process: dict(counts) for process, counts in UNITS_PER_GAME.items()}
        else:
            units = units_of_traffic(traffic)
        units["table"]["stream command served"] = self.commands
        units["table"]["transaction"] = self.commands / self.commands_per_batch
        units["bots"]["stream command sent"] = self.commands
        return units


def units_of_traffic(traffic: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Each process's calls and records a game from a `bench_system` run's service counters (its
    `traffic_per_game`): each service's calls served and records produced and consumed as it
    counted them; the calls the bots made are those the table, matchmaking and scoring served, and
    matchmaking's those the ledger served (each Enqueue's GetBalance); the broker carries the
    records consumed."""
    units = {
        service: {
            "call served": counts["calls"],
            "record produced": counts["records produced"],
            "record consumed": counts["records consumed"],
        }
        for service, counts in traffic.items()
    }
    units["matchmaking"]["call made"] = traffic["ledger"]["calls"]
    units["bots"] = {
        "call made": sum(traffic[service]["calls"] for service in ("table", "matchmaking", "scoring"))
    }
    units["kafka broker"] = {
        "record through the broker": sum(c["records consumed"] for c in traffic.values())
    }
    return units


UNITS = (
    "stream command served",
    "stream command sent",
    "call served",
    "call made",
    "record produced",
    "record consumed",
    "record through the broker",
    "transaction",
)


def unit_costs(
    grpc_floor: GrpcFloor, kafka_floor: KafkaFloor, transaction_floor: TransactionFloor
) -> dict[str, float]:
    """CPU seconds of each unit. A broker not measured costs 0 (the floor is then lower still)."""
    return {
        "stream command served": grpc_floor.server_cpu_seconds / grpc_floor.commands,
        "stream command sent": grpc_floor.client_cpu_seconds / grpc_floor.commands,
        "call served": grpc_floor.call_server_cpu_seconds / grpc_floor.calls,
        "call made": grpc_floor.call_client_cpu_seconds / grpc_floor.calls,
        "record produced": kafka_floor.producer_cpu_seconds / kafka_floor.records,
        "record consumed": kafka_floor.consumer_cpu_seconds / kafka_floor.consumed,
        "record through the broker": (kafka_floor.broker_cpu_seconds or 0.0) / kafka_floor.records,
        "transaction": transaction_floor.cpu_seconds / transaction_floor.transactions,
    }


def floor_by_process(units: dict[str, dict[str, float]], costs: dict[str, float]) -> dict[str, float]:
    """CPU seconds a game of each process's units, and "everything": their sum."""
    floors = {
        process: sum(count * costs[unit] for unit, count in counts.items())
        for process, counts in units.items()
    }
    return {**floors, "everything": sum(floors.values())}


def against_measured(floors: dict[str, float], measured: dict[str, float]) -> dict[str, dict[str, float]]:
    """For each process of a `bench_system` run (its `cpu_seconds_per_game`), its floor and what
    it spent above it."""
    return {
        process: {"measured": measured[process], "floor": floor, "above": measured[process] - floor}
        for process, floor in floors.items()
        if process in measured
    }


def ratio_budget(engine_seconds_per_game: float, ratio: float = 0.05, cores: int = 2) -> float:
    """CPU seconds per game everything may take for the full system to make `ratio` of the pure
    engine's games per second on `cores` cores: games/s = cores / cpu, engine = 1 / its seconds."""
    return cores / ratio * engine_seconds_per_game


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
    answer = b"a" * CALL_RESPONSE_BYTES

    async def play(requests: AsyncIterator[bytes], _context: Any) -> AsyncIterator[bytes]:
        owed = 0.0
        async for _request in requests:
            owed += responses_per_command
            count = max(1, int(owed))
            owed -= count
            for _ in range(count - 1):
                yield payload_more
            yield payload_last

    async def call(_request: bytes, _context: Any) -> bytes:
        return answer

    async def serve() -> None:
        server = grpc.aio.server()
        handlers = {
            "Play": grpc.stream_stream_rpc_method_handler(play),
            "Call": grpc.unary_unary_rpc_method_handler(call),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("floor.Floor", handlers),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        port_out.send(port)
        await server.wait_for_termination()

    asyncio.run(serve())


def _client_environment() -> None:
    """The client's gRPC settings are the bot processes' (`mjctl.load.BOT_GRPC_EXPERIMENTS`);
    before gRPC is imported."""
    from mjctl.load import BOT_GRPC_EXPERIMENTS

    os.environ.setdefault("GRPC_EXPERIMENTS", BOT_GRPC_EXPERIMENTS)


class _Pace:
    """Spaces one of `tasks` tasks' turns so that all of them together make `per_second` a
    second (None: no pause): each task keeps its own phase, its first turn `index / tasks` of an
    interval after the start and then one every `tasks / per_second` seconds. A task that comes
    late (a slow first connection, the warm-up's barrier, the process paused on a busy box) waits
    for its next slot instead of going at once, so late tasks never go together (commands that
    come together share wake-ups and cost less: the floor would come out too low) and none bursts
    to catch up. Each pause is an `asyncio.sleep`, a timer like the bots' own wake-ups, about
    10-20 us of the client's CPU."""

    def __init__(self, tasks: int, per_second: float | None, index: int) -> None:
        assert per_second is None or per_second > 0, per_second
        self._interval = tasks / per_second if per_second else 0.0
        self._due = time.monotonic() + self._interval * index / tasks

    async def turn(self) -> None:
        if not self._interval:
            return
        now = time.monotonic()
        if self._due < now:  # late: the slots it missed are skipped, it keeps its phase
            self._due += math.ceil((now - self._due) / self._interval) * self._interval
        await asyncio.sleep(self._due - now)
        self._due += self._interval


def _grpc_stream_client(
    port: int,
    streams: int,
    commands: int,
    request_bytes: int,
    phases: Connection,
    commands_per_second: float | None = None,
) -> None:
    _client_environment()
    import grpc

    request = b"r" * request_bytes
    per_stream = commands // streams
    warm_up = max(1, int(per_stream * WARM_UP_FRACTION))

    counted = {"commands": 0, "responses": 0}  # answered after the warm-up

    async def run() -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            play = channel.stream_stream(_PLAY)
            warmed = asyncio.Barrier(streams + 1)

            async def seat(index: int) -> None:
                call = play()
                pace = _Pace(streams, commands_per_second, index)
                for sent in range(warm_up + per_stream):
                    if sent == warm_up:
                        await warmed.wait()
                    await pace.turn()
                    await call.write(request)
                    responses = 1
                    while (await call.read())[:1] != _LAST:
                        responses += 1
                    if sent >= warm_up:
                        counted["commands"] += 1
                        counted["responses"] += responses
                await call.done_writing()
                await call.code()

            seats = [asyncio.create_task(seat(index)) for index in range(streams)]
            await warmed.wait()
            phases.send("measuring")
            await asyncio.gather(*seats)
            phases.send(("done", counted["commands"], counted["responses"]))

    asyncio.run(run())


def _grpc_call_client(
    port: int,
    callers: int,
    calls: int,
    request_bytes: int,
    phases: Connection,
    calls_per_second: float | None = None,
) -> None:
    _client_environment()
    import grpc

    request = b"r" * request_bytes
    per_caller = calls // callers
    warm_up = max(1, int(per_caller * WARM_UP_FRACTION))

    counted = {"calls": 0}  # answered after the warm-up

    async def run() -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary(_CALL)
            warmed = asyncio.Barrier(callers + 1)

            async def caller(index: int) -> None:
                pace = _Pace(callers, calls_per_second, index)
                for made in range(warm_up + per_caller):
                    if made == warm_up:
                        await warmed.wait()
                    await pace.turn()
                    await call(request)
                    if made >= warm_up:
                        counted["calls"] += 1

            tasks = [asyncio.create_task(caller(index)) for index in range(callers)]
            await warmed.wait()
            phases.send("measuring")
            await asyncio.gather(*tasks)
            phases.send(("done", counted["calls"]))

    asyncio.run(run())


def _measure_client(
    server: multiprocessing.process.BaseProcess,
    client: multiprocessing.process.BaseProcess,
    phases: Connection,
) -> tuple[float, float, float, tuple[Any, ...]]:
    """Run `client` against `server`; (wall seconds, server CPU, client CPU) of its measured phase
    and what the client counted in it (its "done" message)."""
    client.start()
    try:
        _receive(phases, client, 120, "the gRPC floor client did not warm up")
        assert server.pid is not None and client.pid is not None
        started = time.perf_counter()
        server_before, client_before = cpu_seconds(server.pid), cpu_seconds(client.pid)
        done = _receive(phases, client, 600, "the gRPC floor client did not finish")
        server_after, client_after = cpu_seconds(server.pid), cpu_seconds(client.pid)
        seconds = time.perf_counter() - started
        client.join(30)
        if client.exitcode != 0:
            raise RuntimeError(f"the gRPC floor client exited with {client.exitcode}")
        return seconds, server_after - server_before, client_after - client_before, done[1:]
    finally:
        if client.is_alive():
            client.terminate()
            client.join(10)


def measure_grpc(
    commands: int = 20_000,
    streams: int = STREAMS,
    responses_per_command: float = RESPONSES_PER_COMMAND,
    calls: int = 4_000,
    callers: int = CALLERS,
    request_bytes: int = REQUEST_BYTES,
    response_bytes: int = RESPONSE_BYTES,
    commands_per_second: float | None = None,
    calls_per_second: float | None = None,
) -> GrpcFloor:
    """`commands` commands over `streams` streams, then `calls` unary calls from `callers` at once;
    the server and each client a process of its own. At `commands_per_second` and
    `calls_per_second` (the system's pace: a command or call costs more the fewer come together,
    each a wake-up of its own) or, with None, as fast as they go."""
    assert streams >= 1 and commands >= streams and responses_per_command >= 1 and calls >= callers >= 1
    context = multiprocessing.get_context("spawn")  # no fork: gRPC's threads do not survive one
    port_in, port_out = context.Pipe(duplex=False)
    server = context.Process(
        target=_grpc_server, args=(port_out, response_bytes, responses_per_command), daemon=True
    )
    server.start()
    try:
        port = _receive(port_in, server, 60, "the gRPC floor server did not start")
        phases, phases_out = context.Pipe(duplex=False)
        stream_client = context.Process(
            target=_grpc_stream_client,
            args=(port, streams, commands, request_bytes, phases_out, commands_per_second),
            daemon=True,
        )
        seconds, server_cpu, client_cpu, (answered, responses) = _measure_client(
            server, stream_client, phases
        )
        call_client = context.Process(
            target=_grpc_call_client,
            args=(port, callers, calls, request_bytes, phases_out, calls_per_second),
            daemon=True,
        )
        call_seconds, call_server_cpu, call_client_cpu, (made,) = _measure_client(server, call_client, phases)
        return GrpcFloor(
            commands=answered,
            streams=streams,
            responses_per_command=responses / answered,
            seconds=seconds,
            server_cpu_seconds=server_cpu,
            client_cpu_seconds=client_cpu,
            calls=made,
            call_server_cpu_seconds=call_server_cpu,
            call_client_cpu_seconds=call_client_cpu,
            commands_per_second=commands_per_second,
            calls_per_second=calls_per_second,
            call_seconds=call_seconds,
        )
    finally:
        if server.is_alive():
            server.terminate()
            server.join(10)


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
    read = counted = 0
    before: float | None = None
    # A poll takes at most the warm-up's count: one that comes late (a busy box) cannot take the
    # warm-up and every measured record at once, which would leave the window never opened.
    most = min(500, warm_up)
    while read < warm_up + records:
        if before is None and read >= warm_up:
            before = time.process_time()
        for batch in consumer.poll(timeout_ms=1_000, max_records=most).values():
            read += len(batch)
            if before is not None:
                counted += len(batch)
    assert before is not None
    phases.send(("done", time.process_time() - before, counted))
    consumer.close()


def measure_kafka(
    bootstrap_servers: str,
    broker_pid: int | None,
    records: int = 10_000,
    relay_batch: int = RELAY_BATCH,
    record_bytes: int = RECORD_BYTES,
    records_per_second: float = RECORDS_PER_SECOND,
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
        _done, consumer_cpu, consumed = _receive(
            consumer_phases, consumer, 120, "the Kafka floor consumer did not finish"
        )
        seconds = time.perf_counter() - started
        broker_cpu = None
        if broker_pid is not None and broker_before is not None:
            broker_cpu = cpu_seconds(broker_pid) - broker_before
        return KafkaFloor(
            records=records,
            consumed=consumed,
            relay_batch=relay_batch,
            seconds=seconds,
            producer_cpu_seconds=producer_cpu,
            consumer_cpu_seconds=consumer_cpu,
            broker_cpu_seconds=broker_cpu,
            records_per_second=records_per_second,
        )
    except BaseException:
        for process in (producer, consumer):
            if process.is_alive():
                process.terminate()
        raise
    finally:
        for process in (producer, consumer):
            if process.pid is not None:
                process.join(30)
                if process.is_alive():
                    process.terminate()
                    process.join(10)


# SQLite and PostgreSQL ---------------------------------------------------------------------------

_SCHEMA = (
    "CREATE TABLE events (stream_id TEXT NOT NULL, sequence INTEGER NOT NULL, event_id TEXT NOT NULL"
    " UNIQUE, occurred_at TEXT NOT NULL, payload BLOB NOT NULL, PRIMARY KEY (stream_id, sequence))",
    "CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, message_key TEXT"
    " NOT NULL, message_value BLOB NOT NULL, event_id TEXT NOT NULL, sent_at TEXT, UNIQUE (topic, event_id))",
    "CREATE TABLE answers (idempotency_key TEXT PRIMARY KEY, body BLOB NOT NULL)",
)
_POSTGRESQL_SCHEMA = tuple(
    statement.replace("BLOB", "BYTEA")
    .replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
    .replace("sequence INTEGER", "sequence BIGINT")
    for statement in _SCHEMA
)
_COLUMNS = {
    "events": "(stream_id, sequence, event_id, occurred_at, payload)",
    "outbox": "(topic, message_key, message_value, event_id, sent_at)",
    "answers": "(idempotency_key, body)",
}

_Batch = tuple[int, int, list[object], list[object], list[object]]
"""A group commit's commands, events, and its events', outbox rows' and answers' parameters."""


def _rows_statement(table: str, rows: int, placeholder: str = "?", suffix: str = "") -> str:
    """A multi-row INSERT of `rows` rows into `table` (named with `suffix`: PostgreSQL's own tables)."""
    columns = _COLUMNS[table]
    row = "(" + ", ".join([placeholder] * (columns.count(",") + 1)) + ")"
    return f"INSERT INTO {table}{suffix} {columns} VALUES " + ", ".join([row] * rows)


def _batches(
    count: int, commands_per_batch: float, events_per_command: float, record_bytes: int
) -> list[_Batch]:
    """`count` group commits' rows, built before any is timed (only the database is measured)."""
    payload = b"e" * record_bytes
    answer = b"a" * 40
    streams = [str(uuid.uuid4()) for _ in range(KEYS)]
    sequences = dict.fromkeys(streams, 0)
    owed_commands = owed_events = 0.0
    batches: list[_Batch] = []
    for number in range(count):
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
            outbox_rows += ("mahjong.table.v1", stream, payload, event_id, None)
        answer_rows: list[object] = []
        for _ in range(commands):
            answer_rows += (str(uuid.uuid4()), answer)
        batches.append((commands, events, event_rows, outbox_rows, answer_rows))
    return batches


def _write(
    database: str,
    batches: list[_Batch],
    warm_up: int,
    commands_per_batch: float,
    placeholder: str,
    execute: Callable[[str, list[object]], object],
    commit: Callable[[], object],
    server_pid: int | None = None,
    suffix: str = "",
) -> TransactionFloor:
    """Write the batches, each one transaction; the figures of those after the first `warm_up`
    (this process's CPU, the server's when `server_pid` names it). The statements are written
    before any is timed, into the tables named with `suffix`."""
    statements: dict[tuple[int, int], tuple[str, str, str]] = {}
    for commands, events, *_rows in batches:
        statements[commands, events] = (
            _rows_statement("events", events, placeholder, suffix),
            _rows_statement("outbox", events, placeholder, suffix),
            _rows_statement("answers", commands, placeholder, suffix),
        )
    rows = 0
    before = server_before = 0.0
    for number, (commands, events, event_rows, outbox_rows, answer_rows) in enumerate(batches):
        if number == warm_up:
            before, rows = time.process_time(), 0
            server_before = cpu_seconds(server_pid) if server_pid is not None else 0.0
        insert_events, insert_outbox, insert_answers = statements[commands, events]
        if events:
            execute(insert_events, event_rows)
            execute(insert_outbox, outbox_rows)
        execute(insert_answers, answer_rows)
        commit()
        rows += 2 * events + commands
    cpu = time.process_time() - before
    transactions = len(batches) - warm_up
    return TransactionFloor(
        database=database,
        transactions=transactions,
        commands_per_batch=commands_per_batch,
        rows_per_transaction=round(rows / transactions),
        cpu_seconds=cpu,
        server_cpu_seconds=cpu_seconds(server_pid) - server_before if server_pid is not None else None,
    )


def measure_sqlite(
    transactions: int = 2_000,
    commands_per_batch: float = COMMANDS_PER_BATCH,
    events_per_command: float = EVENTS_PER_COMMAND,
    record_bytes: int = RECORD_BYTES,
) -> TransactionFloor:
    """`transactions` group-commit batches written through the bare driver, as the table's store
    is set up (WAL, `synchronous=FULL`): BEGIN IMMEDIATE, one multi-row INSERT each of the
    batch's events, outbox rows and answers, COMMIT. CPU of this process (SQLite runs in it)."""
    assert transactions >= 1 and commands_per_batch >= 1 and events_per_command >= 0
    warm_up = max(1, int(transactions * WARM_UP_FRACTION))
    batches = _batches(warm_up + transactions, commands_per_batch, events_per_command, record_bytes)
    with tempfile.TemporaryDirectory(prefix="mahjong-floor-") as folder:
        connection = sqlite3.connect(Path(folder) / "floor.sqlite3", isolation_level=None)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
            for statement in _SCHEMA:
                connection.execute(statement)
            begun = False

            def execute(statement: str, parameters: list[object]) -> None:
                nonlocal begun
                if not begun:
                    connection.execute("BEGIN IMMEDIATE")
                    begun = True
                connection.execute(statement, parameters)

            def commit() -> None:
                nonlocal begun
                connection.execute("COMMIT")
                begun = False

            return _write("sqlite", batches, warm_up, commands_per_batch, "?", execute, commit)
        finally:
            connection.close()


def measure_postgresql(
    conninfo: str,
    transactions: int = 2_000,
    commands_per_batch: float = COMMANDS_PER_BATCH,
    events_per_command: float = EVENTS_PER_COMMAND,
    record_bytes: int = RECORD_BYTES,
) -> TransactionFloor:
    """The same group commits through psycopg on the bare driver (one multi-row INSERT each, then
    COMMIT), into new tables of the database `conninfo` names: CPU of this process and of the
    server's backend serving the connection (a server on this machine; else None)."""
    import psycopg

    assert transactions >= 1 and commands_per_batch >= 1 and events_per_command >= 0
    warm_up = max(1, int(transactions * WARM_UP_FRACTION))
    batches = _batches(warm_up + transactions, commands_per_batch, events_per_command, record_bytes)
    with psycopg.connect(conninfo) as connection:
        suffix = uuid.uuid4().hex[:8]
        schema = [
            statement.replace("CREATE TABLE events", f"CREATE TABLE events_{suffix}")
            .replace("CREATE TABLE outbox", f"CREATE TABLE outbox_{suffix}")
            .replace("CREATE TABLE answers", f"CREATE TABLE answers_{suffix}")
            for statement in _POSTGRESQL_SCHEMA
        ]
        for statement in schema:
            connection.execute(statement)
        backend = connection.execute("SELECT pg_backend_pid()").fetchone()
        connection.commit()
        server_pid = int(backend[0]) if backend is not None and Path(f"/proc/{backend[0]}").exists() else None

        try:
            return _write(
                "postgresql",
                batches,
                warm_up,
                commands_per_batch,
                "%s",
                connection.execute,
                connection.commit,
                server_pid,
                suffix=f"_{suffix}",
            )
        finally:
            for table in ("events", "outbox", "answers"):
                connection.execute(f"DROP TABLE IF EXISTS {table}_{suffix}")
            connection.commit()


# The whole -----------------------------------------------------------------------------------------


def engine_seconds_per_game(games: int = 200) -> float:
    """The pure engine's seconds per game in this run (`mahjong_table.bench`, Sichuan; wall clock,
    as `bench_system`'s ratio takes its games a second)."""
    from mahjong_table.bench import run

    result = run(games)
    return result["seconds"] / result["games"]


@contextmanager
def _postgresql() -> Iterator[str]:
    """A throwaway PostgreSQL cluster (`mahjong_infra.postgres`: fsync off, as `bench_system`'s) and
    a database in it; its libpq connection string."""
    from mahjong_infra import postgres

    cluster = postgres.PostgresCluster()
    cluster.start()
    try:
        yield cluster.create_database("floor").replace("postgresql+psycopg://", "postgresql://", 1)
    finally:
        cluster.stop()


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


def kafka_pace(
    run: dict[str, Any] | None, relay_batch: int | None, records_per_second: float | None
) -> tuple[int, float]:
    """The Kafka floor's records a publish and records a second: as given; else a measured
    `bench_system` run's (`run`): its table's records a second and its table relay's records a
    round (a run kept before the relay counted its rounds: the rounds the relay makes at that
    pace, `relay_batch_at`); else `RELAY_BATCH` and `RECORDS_PER_SECOND`."""
    table = ((run or {}).get("traffic_per_game") or {}).get("table", {})
    if records_per_second is None:
        if run is not None and table.get("records produced"):
            records_per_second = table["records produced"] * run["games_settled_per_second"]
        else:
            records_per_second = RECORDS_PER_SECOND
    if relay_batch is None:
        if table.get("relay rounds"):
            relay_batch = max(1, round(table["records produced"] / table["relay rounds"]))
        else:
            relay_batch = relay_batch_at(records_per_second)
    return relay_batch, records_per_second


def commands_per_game_of(run: dict[str, Any]) -> float:
    """A measured `bench_system` run's Play commands a game (its Acts of every kind over its games)."""
    return float(run["act_by_kind"]["all"]["count"] / run["games"])


CALLS_PER_GAME = sum(
    units.get("call served", 0.0) for units in UNITS_PER_GAME.values()
)  # the table's, matchmaking's and the ledger's: 16
PACED_SECONDS = 30


def grpc_pace(
    run: dict[str, Any] | None,
    commands_per_second: float | None,
    calls_per_second: float | None,
    commands_per_game: float = COMMANDS_PER_GAME,
) -> tuple[float | None, float | None]:
    """The gRPC floor's stream commands and unary calls a second: as given (0: as fast as they
    go, None returned); else a measured `bench_system` run's (its commands a game and, when it
    counted them, its services' calls a game, times its games a second); else issue 10's 10
    games a second's (`commands_per_game`, `CALLS_PER_GAME`). A command costs more the fewer come
    together: each is a wake-up of its own."""
    rate = 10.0
    calls_per_game = CALLS_PER_GAME
    if run is not None:
        rate = run["games_settled_per_second"]
        commands_per_game = commands_per_game_of(run)
        traffic = run.get("traffic_per_game")
        if traffic:
            calls_per_game = sum(counts.get("calls", 0.0) for counts in traffic.values())
    if commands_per_second is None:
        commands_per_second = commands_per_game * rate
    if calls_per_second is None:
        calls_per_second = calls_per_game * rate
    if commands_per_second < 0 or calls_per_second < 0:
        raise ValueError(
            f"a pace is a number of commands or calls a second, 0 for as fast as they go, not"
            f" {commands_per_second} and {calls_per_second}"
        )
    return commands_per_second or None, calls_per_second or None


def paced_count(per_second: float | None, most: int, least: int) -> int:
    """How many to measure at `per_second`: `PACED_SECONDS` of them, at most `most` (all of them
    as fast as they go), at least `least` (one each for the streams or callers), a multiple of
    `least`."""
    count = most if per_second is None else min(most, round(PACED_SECONDS * per_second))
    return max(least, count - count % least)


def report(
    counts: GameCounts,
    grpc_floor: GrpcFloor,
    kafka_floor: KafkaFloor,
    transaction_floor: TransactionFloor,
    engine_seconds: float,
    measured: dict[str, float] | None = None,
    traffic: dict[str, dict[str, float]] | None = None,
) -> dict[str, Any]:
    """Every figure of a run, for `--json` and for the tables; `measured`: a `bench_system` run's
    CPU seconds per game by process, set against the floor; `traffic`: its service counters a game
    (the units, instead of `UNITS_PER_GAME`)."""
    units = counts.units(traffic)
    costs = unit_costs(grpc_floor, kafka_floor, transaction_floor)
    floors = floor_by_process(units, costs)
    budget = ratio_budget(engine_seconds)
    return {
        "counts": dataclasses.asdict(counts),
        "units_from": "the measured run's service counters" if traffic else "UNITS_PER_GAME",
        "grpc": dataclasses.asdict(grpc_floor),
        "kafka": dataclasses.asdict(kafka_floor),
        "transactions": dataclasses.asdict(transaction_floor),
        "units_per_game": units,
        "unit_cpu_seconds": costs,
        "floor_cpu_seconds_per_game": floors,
        "measured": against_measured(floors, measured) if measured else {},
        "engine_seconds_per_game": engine_seconds,
        "ratio_budget_cpu_seconds_per_game": budget,
        "floor_share_of_budget": floors["everything"] / budget,
        "load_average": list(os.getloadavg()),
    }


UNIT_NAMES = {
    "stream command served": "gRPC server: a command in, {responses:.2f} responses out ({streams} streams,"
    " {command_pace})",
    "stream command sent": "gRPC client: the same, the other end",
    "call served": "gRPC server: a unary call ({callers} at once, {call_pace})",
    "call made": "gRPC client: a unary call",
    "record produced": "Kafka producer: a record, {batch} a publish with a flush ({record_pace})",
    "record consumed": "Kafka consumer: a record, read as it comes",
    "record through the broker": "Kafka broker: a record in and out",
    "transaction": "{database}: a group commit of {commands:.1f} commands ({rows} rows)",
}


def _pace(per_second: float | None, count: int, seconds: float) -> str:
    """How a unit was paced: the pace asked and the pace made, or "flat out" and the pace made."""
    made = f"{count / seconds:,.0f}" if seconds > 0 else "?"
    if per_second is None:
        return f"flat out: {made} a second"
    return f"{per_second:,.0f} a second asked, {made} made"


def markdown(figures: dict[str, Any]) -> str:
    grpc_floor, kafka_floor, transaction_floor = figures["grpc"], figures["kafka"], figures["transactions"]
    database = {"sqlite": "SQLite", "postgresql": "PostgreSQL, the client"}[transaction_floor["database"]]
    names = {
        unit: text.format(
            responses=grpc_floor["responses_per_command"],
            streams=grpc_floor["streams"],
            callers=CALLERS,
            command_pace=_pace(
                grpc_floor["commands_per_second"], grpc_floor["commands"], grpc_floor["seconds"]
            ),
            call_pace=_pace(grpc_floor["calls_per_second"], grpc_floor["calls"], grpc_floor["call_seconds"]),
            record_pace=_pace(
                kafka_floor["records_per_second"], kafka_floor["records"], kafka_floor["seconds"]
            ),
            batch=kafka_floor["relay_batch"],
            commands=transaction_floor["commands_per_batch"],
            rows=transaction_floor["rows_per_transaction"],
            database=database,
        )
        for unit, text in UNIT_NAMES.items()
    }
    units, costs = figures["units_per_game"], figures["unit_cpu_seconds"]
    lines = [
        "| unit (CPU of the process doing it) | µs each | a game | CPU s / game |",
        "|---|---:|---:|---:|",
    ]
    for unit in UNITS:
        count = sum(process_units.get(unit, 0.0) for process_units in units.values())
        cost = costs[unit]
        each = (
            "not measured"
            if unit == "record through the broker" and figures["kafka"]["broker_cpu_seconds"] is None
            else f"{1e6 * cost:,.0f}"
        )
        lines.append(f"| {names[unit]} | {each} | {count:.1f} | {count * cost:.4f} |")
    floors = figures["floor_cpu_seconds_per_game"]
    if transaction_floor["server_cpu_seconds"] is not None:
        served = units["table"]["transaction"]
        each_served = transaction_floor["server_cpu_seconds"] / transaction_floor["transactions"]
        lines.append(
            "| PostgreSQL, its backend: the same (not in the floor: `bench_system` counts no server's"
            f" CPU) | {1e6 * each_served:,.0f} | {served:.1f} | {served * each_served:.4f} |"
        )
    lines += [
        f"| **the stack's floor, a game** | | | **{floors['everything']:.4f}** |",
        f"| pure engine, seconds a game (same run) | | | {figures['engine_seconds_per_game']:.4f} |",
        "| issue 10's ratio budget (0.05 of the engine on 2 cores = 40 × the engine) | | |"
        f" {figures['ratio_budget_cpu_seconds_per_game']:.4f} |",
        f"| floor ÷ budget | | | {figures['floor_share_of_budget']:.2f} |",
        f"| a game's units counted by | | | {figures['units_from']} |",
        "| load average (1/5/15 min) | | | " + " ".join(f"{x:.2f}" for x in figures["load_average"]) + " |",
        "",
    ]
    if figures["measured"]:
        lines += [
            "| process (CPU s / game) | measured (bench_system) | the stack's floor | above the floor |",
            "|---|---:|---:|---:|",
        ]
        for process, row in figures["measured"].items():
            lines.append(f"| {process} | {row['measured']:.4f} | {row['floor']:.4f} | {row['above']:.4f} |")
    else:
        lines += ["| process | the stack's floor (CPU s / game) |", "|---|---:|"]
        lines += [f"| {process} | {floor:.4f} |" for process, floor in floors.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--commands",
        type=int,
        help="gRPC commands measured (default: 30 s of them at their pace, at most 20000)",
    )
    parser.add_argument(
        "--commands-per-second",
        type=float,
        help="the stream commands' pace (default: the --measured run's, else 10 games a second's;"
        " 0: as fast as they go)",
    )
    parser.add_argument("--streams", type=int, default=STREAMS, help=f"gRPC streams (default {STREAMS})")
    parser.add_argument(
        "--calls",
        type=int,
        help="gRPC unary calls measured (default: 30 s of them at their pace, at most 4000)",
    )
    parser.add_argument(
        "--calls-per-second",
        type=float,
        help="the unary calls' pace (default: the --measured run's, else 10 games a second's; 0: as fast"
        " as they go)",
    )
    parser.add_argument("--records", type=int, default=10_000, help="Kafka records measured (default 10000)")
    parser.add_argument(
        "--relay-batch",
        type=int,
        help="records a publish (default: the --measured run's table records a relay round, else"
        f" {RELAY_BATCH})",
    )
    parser.add_argument(
        "--records-per-second",
        type=float,
        help="the producer's pace (default: the --measured run's table records a second, else the"
        " table's records at 10 games a second)",
    )
    parser.add_argument("--transactions", type=int, default=2_000, help="group commits (default 2000)")
    parser.add_argument(
        "--database",
        choices=("sqlite", "postgresql"),
        default="sqlite",
        help="the group commits' database (postgresql: a throwaway cluster, as bench_system's)",
    )
    parser.add_argument(
        "--engine-games", type=int, default=200, help="pure engine games, without --measured (default 200)"
    )
    parser.add_argument("--commands-per-game", type=float, default=COMMANDS_PER_GAME)
    parser.add_argument("--responses-per-command", type=float, default=RESPONSES_PER_COMMAND)
    parser.add_argument("--commands-per-batch", type=float, default=COMMANDS_PER_BATCH)
    parser.add_argument("--bootstrap-servers", help="an existing broker (default: start one on free ports)")
    parser.add_argument(
        "--measured",
        type=Path,
        help="a `python -m mjctl.bench_system --json` file: set its saturation run's CPU per game"
        " by process against the floor (and take its commands and responses per command, and its"
        " same-run pure engine for the budget, and its table relay's records a round and a second"
        " for the Kafka floor's pace)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    arguments = parser.parse_args(argv)
    measured: dict[str, float] | None = None
    engine: float | None = None
    traffic: dict[str, dict[str, float]] | None = None
    run: dict[str, Any] | None = None
    if arguments.measured is not None:
        run = json.loads(arguments.measured.read_text())["saturation"]
        measured = run["cpu_seconds_per_game"]
        arguments.commands_per_game = commands_per_game_of(run)
        arguments.responses_per_command = run["responses_per_command"]
        engine = 1 / run["engine_games_per_second"]  # the figure that run's ratio divides by
        traffic = run.get("traffic_per_game")  # a run of main before the counters has none
    relay_batch, records_per_second = kafka_pace(run, arguments.relay_batch, arguments.records_per_second)
    if not 1 <= relay_batch <= arguments.records or records_per_second <= 0:
        parser.error("--relay-batch from 1 to --records, --records-per-second above 0")
    try:
        commands_per_second, calls_per_second = grpc_pace(
            run, arguments.commands_per_second, arguments.calls_per_second, arguments.commands_per_game
        )
    except ValueError as error:
        parser.error(str(error))
    commands = (
        paced_count(commands_per_second, 20_000, arguments.streams)
        if arguments.commands is None
        else arguments.commands
    )
    calls = paced_count(calls_per_second, 4_000, CALLERS) if arguments.calls is None else arguments.calls
    if commands < arguments.streams or calls < CALLERS:
        parser.error(f"--commands at least --streams ({arguments.streams}), --calls at least {CALLERS}")
    counts = GameCounts(
        commands=arguments.commands_per_game,
        responses_per_command=arguments.responses_per_command,
        commands_per_batch=arguments.commands_per_batch,
    )
    if engine is None:
        engine = engine_seconds_per_game(arguments.engine_games)
    grpc_floor = measure_grpc(
        commands,
        arguments.streams,
        counts.responses_per_command,
        calls,
        commands_per_second=commands_per_second,
        calls_per_second=calls_per_second,
    )
    with _broker(arguments.bootstrap_servers) as (bootstrap_servers, broker_pid):
        kafka_floor = measure_kafka(
            bootstrap_servers,
            broker_pid,
            arguments.records,
            relay_batch,
            records_per_second=records_per_second,
        )
    if arguments.database == "postgresql":
        with _postgresql() as conninfo:
            transaction_floor = measure_postgresql(
                conninfo, arguments.transactions, counts.commands_per_batch
            )
    else:
        transaction_floor = measure_sqlite(arguments.transactions, counts.commands_per_batch)
    figures = report(counts, grpc_floor, kafka_floor, transaction_floor, engine, measured, traffic)
    print(markdown(figures))
    if arguments.json is not None:
        arguments.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
