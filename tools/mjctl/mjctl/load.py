"""``mjctl bots --processes K`` / ``--json FILE``: one bot run spread over K processes, measured as a
whole, so the load generator is not the bottleneck and its CPU is reported apart from the servers'.

Each worker process runs its share of the bots (`bots.run_bots_async`: one event loop, grpc.aio, a
Play stream per seat, with the run's games per bot) and
reports every finished game at once (the parent starts measuring its settlement lag then) and, at
the end, its Act and WatchView delivery latencies. The parent prints the usual summary and, with
``--json``, writes the figures `make bench-system` tabulates.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import multiprocessing
import os
import queue
import resource
import statistics
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

WORKER_REPORT_TIMEOUT_SECONDS = 3600.0
BOT_GRPC_EXPERIMENTS = "-event_engine_client"
"""The bot processes' ``GRPC_EXPERIMENTS`` (unless it is set already): their channels' sockets are
read by the thread that polls their completion queue (gRPC's own poller) instead of by the
EventEngine's threads, which handed each read on to that thread (two wake-ups per message, the
EventEngine threads mostly in futex and epoll_wait: a quarter of a bot process's CPU). Measured:
the bots' CPU per game about 10% less in `make bench-system`, 20% less against a stand-in table."""


@dataclasses.dataclass(frozen=True)
class _WorkerJob:
    room_id: str
    players: int
    rounds: int
    think_ms: int
    player_prefix: str
    starting_balance: int = 0
    hold_idle_updates_ms: int = 0


def percentile(values: Sequence[float], fraction: float) -> float:
    """The value below which `fraction` of `values` lie (nearest rank); 0 for no values."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def act_by_kind(samples: Sequence[Sequence[Any]]) -> dict[str, dict[str, float]]:
    """Per command kind (`bots.ActSample` tuples: kind, arrived, read seconds): how many, the p50
    and p99 from sending to the answer arriving, and the p99 to the bot reading it; "all" last."""
    kinds: dict[str, list[tuple[float, float]]] = {}
    for kind, arrived, read in samples:
        kinds.setdefault(kind, []).append((arrived, read))
    kinds = dict(sorted(kinds.items(), key=lambda item: -len(item[1])))
    kinds["all"] = [(arrived, read) for _kind, arrived, read in samples]
    table: dict[str, dict[str, float]] = {}
    for kind, pairs in kinds.items():
        arrived_values = [arrived for arrived, _read in pairs]
        table[kind] = {
            "count": len(pairs),
            "p50_ms": statistics.median(arrived_values) * 1000 if pairs else 0.0,
            "p99_ms": percentile(arrived_values, 0.99) * 1000,
            "read_p50_ms": statistics.median(read for _arrived, read in pairs) * 1000 if pairs else 0.0,
            "read_p99_ms": percentile([read for _arrived, read in pairs], 0.99) * 1000,
        }
    return table


def act_kind_lines(table: dict[str, dict[str, float]]) -> list[str]:
    """`act_by_kind` as a Markdown table."""
    lines = [
        "| Act by kind | count | p50 ms | p99 ms | read by the bot: p50 / p99 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind, row in table.items():
        lines.append(
            f"| {kind} | {row['count']:.0f} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} "
            f"| {row['read_p50_ms']:.1f} / {row['read_p99_ms']:.1f} |"
        )
    return lines


def _worker(job: _WorkerJob, messages: Any) -> None:
    """One process's bots, on one event loop (`bots.run_bots_async`: grpc.aio, one channel per
    service, a Play stream per seat); everything it learns goes to the parent through `messages`."""
    startup = _own_cpu_seconds()  # the interpreter's start and the modules spawn imported
    import asyncio

    import grpc.aio
    from mahjong_platform.auth import mint_token
    from mahjong_platform.config import load_settings
    from mahjong_platform.grpc_client import open_channel

    from mjctl.bots import run_bots_async, starting_balance_funder

    settings = load_settings()
    fund = None
    if job.starting_balance:
        finance_token = mint_token(settings.jwt_secret, "bots-finance", ["finance"], ttl_seconds=24 * 3600)
        fund = starting_balance_funder(
            open_channel(settings.grpc_target("ledger"), finance_token), job.starting_balance
        )

    def token_for(player_id: str) -> str:
        # Bots are Happy Points members, so they may play the members-only Formula rooms too.
        return mint_token(settings.jwt_secret, player_id, ttl_seconds=24 * 3600, member=True)

    def game_ended(table_id: str, ended_at: datetime.datetime) -> None:
        messages.put(("ended", table_id, ended_at.isoformat()))

    ready = 0.0

    async def run() -> Any:
        nonlocal ready
        ready = _own_cpu_seconds()
        async with (
            grpc.aio.insecure_channel(settings.grpc_target("matchmaking")) as matchmaking,
            grpc.aio.insecure_channel(settings.grpc_target("table")) as table,
        ):
            return await run_bots_async(
                job.room_id,
                job.players,
                job.rounds,
                matchmaking,
                table,
                token_for,
                log=lambda line: messages.put(("line", line)),
                player_prefix=job.player_prefix,
                on_game_ended=game_ended,
                think_seconds=job.think_ms / 1000,
                fund=fund,
                hold_idle_updates_ms=job.hold_idle_updates_ms,
            )

    try:
        report = asyncio.run(run())
    except BaseException as error:
        messages.put(("error", repr(error)))
        return
    messages.put(
        (
            "report",
            {
                "games": len(report.games),
                "delivery_latencies_seconds": report.delivery_latencies_seconds,
                "decision_delivery_latencies_seconds": report.decision_delivery_latencies_seconds,
                "act_samples": [dataclasses.astuple(sample) for sample in report.act_samples],
                "enqueue_refusals": report.enqueue_refusals,
                "play_opens": report.play_opens,
                "play_responses": report.play_responses,
                "play_riding_answers": report.play_riding_answers,
                "cpu_seconds": {"spawn": startup, "imports": ready - startup, "total": _own_cpu_seconds()},
            },
        )
    )


@contextlib.contextmanager
def bot_process_environment() -> Iterator[None]:
    """The environment the bot processes start with (spawned in it): ``GRPC_EXPERIMENTS`` =
    `BOT_GRPC_EXPERIMENTS` unless it is set; this process's environment is restored after."""
    if "GRPC_EXPERIMENTS" in os.environ:
        yield
        return
    os.environ["GRPC_EXPERIMENTS"] = BOT_GRPC_EXPERIMENTS
    try:
        yield
    finally:
        del os.environ["GRPC_EXPERIMENTS"]


def _own_cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_load(arguments: argparse.Namespace) -> int:
    """The body of ``mjctl bots`` with ``--processes`` or ``--json``."""
    from mahjong_platform.config import load_settings

    from mjctl.lag import settlement_lag_probe

    players, processes = arguments.players, max(1, arguments.processes)
    if players < 4 or players % 4:
        raise SystemExit("--players must be a positive multiple of 4 (a table seats four)")
    if processes > players:
        raise SystemExit("--processes must not exceed --players")
    rounds = -(-arguments.games // (players // 4))
    settings = load_settings()
    probe = settlement_lag_probe(settings) if arguments.settlement_lag else None
    context = multiprocessing.get_context("spawn")  # no gRPC state inherited through fork
    messages = context.Queue()
    run_id = uuid.uuid4().hex[:4]
    shares = [players // processes + (index < players % processes) for index in range(processes)]
    workers = [
        context.Process(
            target=_worker,
            args=(
                _WorkerJob(
                    arguments.room,
                    share,
                    rounds,
                    arguments.think_ms,
                    f"bot{run_id}p{index}",
                    getattr(arguments, "starting_balance", 0),
                    arguments.hold_idle_updates_ms,
                ),
                messages,
            ),
            daemon=True,
        )
        for index, share in enumerate(shares)
    ]
    started, started_at = time.monotonic(), time.time()
    with bot_process_environment():
        for worker in workers:
            worker.start()
    reports, errors = _collect(messages, len(workers), probe)
    seconds = time.monotonic() - started
    for worker in workers:
        if errors and worker.is_alive():
            worker.terminate()  # its bots would wait for the stopped process's players forever
        worker.join()
    samples = [sample for report in reports for sample in report["act_samples"]]
    act = [read for _kind, _arrived, read in samples]
    delivery = [value for report in reports for value in report["delivery_latencies_seconds"]]
    decisions = [value for report in reports for value in report["decision_delivery_latencies_seconds"]]
    games = sum(report["games"] for report in reports)
    kinds = act_by_kind(samples)
    figures: dict[str, Any] = {
        "games": games,
        "tables": players // 4,
        "processes": processes,
        "think_ms": arguments.think_ms,
        "hold_idle_updates_ms": arguments.hold_idle_updates_ms,
        "seconds_played": seconds,
        "act_p50_ms": statistics.median(act) * 1000 if act else 0.0,
        "act_p99_ms": percentile(act, 0.99) * 1000,
        "act_calls": len(act),
        "delivery_p50_ms": statistics.median(delivery) * 1000 if delivery else 0.0,
        "delivery_p99_ms": percentile(delivery, 0.99) * 1000,
        "decision_delivery_p99_ms": percentile(decisions, 0.99) * 1000,
        "act_by_kind": kinds,
        "enqueue_refused": sum(report["enqueue_refusals"] for report in reports),
        "play_opens": sum(report["play_opens"] for report in reports),
        "play_responses": sum(report["play_responses"] for report in reports),
        "play_riding_answers": sum(report["play_riding_answers"] for report in reports),
    }
    print(f"{games} games in {seconds:.1f} s = {games / seconds:.2f} games/s ({processes} bot processes)")
    act_p50, act_p99 = figures["act_p50_ms"], figures["act_p99_ms"]
    print(f"Act latency over {len(act)} calls: p50 {act_p50:.1f} ms, p99 {act_p99:.1f} ms")
    print(
        f"WatchView delivery (event occurred -> bot read it): p99 {figures['delivery_p99_ms']:.1f} ms; "
        f"of a decision (the last event of an update asking the bot): p99 "
        f"{figures['decision_delivery_p99_ms']:.1f} ms"
    )
    print(
        f"Enqueue refused while matchmaking had not freed the seat yet: {figures['enqueue_refused']} "
        f"({figures['enqueue_refused'] / max(1, games):.2f} per game)"
    )
    print(
        f"Play streams: {figures['play_opens']} opened, {figures['play_responses']} responses received "
        f"for {len(act)} commands ({figures['play_responses'] / max(1, len(act)):.2f} per command; "
        f"{figures['play_riding_answers']} answers rode on updates)"
    )
    print("\n".join(act_kind_lines(kinds)))
    # The bots' CPU while they played (the lag probe's read of the ledger topic comes after).
    usage_self = resource.getrusage(resource.RUSAGE_SELF)
    usage_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    figures["client_cpu_seconds"] = (
        usage_self.ru_utime + usage_self.ru_stime + usage_children.ru_utime + usage_children.ru_stime
    )
    workers_cpu = [report["cpu_seconds"] for report in reports]
    figures["client_cpu_breakdown"] = {
        "parent": usage_self.ru_utime + usage_self.ru_stime,
        **{part: sum(cpu[part] for cpu in workers_cpu) for part in ("spawn", "imports", "total")},
    }
    breakdown = figures["client_cpu_breakdown"]
    print(
        f"bots' CPU: {figures['client_cpu_seconds']:.2f} s = this process {breakdown['parent']:.2f} s + "
        f"bot processes {breakdown['total']:.2f} s (of which starting {breakdown['spawn']:.2f} s, "
        f"importing {breakdown['imports']:.2f} s; {breakdown['total'] / max(1, games):.3f} s per game)"
    )
    if probe is not None:
        print(probe.summary_line())
        lags, unsettled = probe.lags_seconds()
        settled_seconds = max(seconds, probe.last_settled_at() - started_at)
        figures.update(
            lag_p50_ms=statistics.median(lags) * 1000 if lags else 0.0,
            lag_p90_ms=percentile(lags, 0.90) * 1000,
            lag_p99_ms=percentile(lags, 0.99) * 1000,
            lag_max_ms=max(lags, default=0.0) * 1000,
            unsettled=unsettled,
            seconds_settled=settled_seconds,
            games_settled_per_second=len(lags) / settled_seconds,
            lag_source=probe.source,
            lag_hops=probe.hops(),
        )
    if arguments.json:
        with open(arguments.json, "w", encoding="utf-8") as output:
            json.dump(figures, output, indent=2)
    if errors:
        print(f"{len(errors)} bot processes failed; first: {errors[0]}")
        return 1
    return 0


def _collect(messages: Any, workers: int, probe: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """Read the workers' messages until each has reported, or until one failed."""
    reports: list[dict[str, Any]] = []
    errors: list[str] = []
    deadline = time.monotonic() + WORKER_REPORT_TIMEOUT_SECONDS
    while len(reports) + len(errors) < workers:
        try:
            message = messages.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            errors.append(f"no report within {WORKER_REPORT_TIMEOUT_SECONDS:.0f} s")
            break
        kind = message[0]
        if kind == "ended" and probe is not None:
            probe.game_ended(message[1], datetime.datetime.fromisoformat(message[2]))
        elif kind == "line":
            print(message[1], flush=True)
        elif kind == "report":
            reports.append(message[1])
        elif kind == "error":
            # The bots of every process share matchmaking's queue: once one process stops, the
            # others' players may wait for a fourth player forever, so the run stops here.
            errors.append(message[1])
            break
    return reports, errors
