"""``make bench-system`` (``python -m mjctl.bench_system``): the whole system, measured.

Starts a Kafka broker on free ports, a throwaway database (SQLite files by default;
``--database postgresql`` starts a PostgreSQL cluster via `mahjong_infra.postgres`, its autovacuum
visiting every database each second: `POSTGRESQL_SETTINGS`), and the four
services as their own processes on free ports; then plays ``--tables`` tables at once with bots
(``mjctl bots --processes``) twice: at saturation (bots decide at once) and with every bot thinking
``--think-ms`` before each decision. When a run's bots have started it prints one line with the pids
of the services, the broker, ``mjctl bots`` and its bot processes (to attach a profiler while they
play); then, for each run, one table: games settled per second, Act
p50/p99, WatchView delivery p99 (event occurred, stamped just before its commit -> the bot read it;
the bots hold the updates that give them nothing to decide up to 250 ms,
`bots.PLAY_HOLD_IDLE_UPDATES_MS`, ``--hold-idle-updates-ms``) and that of decisions apart (the last
event of each update that asks the bot), settlement lag p50/p90/p99/max (GameEnded -> last TransferPosted,
read from the ledger topic after the run: `mjctl.lag`) and by hop (the table's commit and relay,
scoring, the ledger: p50/p99 of each, and the slowest game's three), the Enqueues refused per game because
matchmaking had not freed a seat yet, CPU seconds per game of each server process, of the Kafka
broker and of the bots apart (while they played), and their sum, and the same run's pure engine rate
(`mahjong_table.bench`) with the ratio full system / pure engine; under it, the Act latency per
command kind (`mjctl.load.act_by_kind`). ``--runs think`` runs only the think-time run. ``--json PATH``
also writes each run's figures, those its table prints (`run_summary`), keyed by run: what
`mjctl.bench_pair` compares. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

SERVICES = ("ledger", "scoring", "table", "matchmaking")
HEALTH_TIMEOUT_SECONDS = 120.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
POSTGRESQL_SETTINGS = {"autovacuum_naptime": "1s"}
"""The run's databases are new: their tables have no statistics until autovacuum analyzes them,
and it visits a database once a minute by default, so a whole run (about a minute) was planned
without any. A statement prepared then keeps a plan made without them (psycopg prepares after five
uses; PostgreSQL then keeps a generic plan): scoring's processed-id check found its group's rows by
the first key column and compared each with every id of the batch (80 ms per batch at 15,000
events, more with every batch), and scoring fell seconds behind (settlement lag p99 4-12 s).
A service that has run for a while has statistics; visiting each second, autovacuum analyzes a
growing table about as it would there (past 50 rows plus a tenth of its size), and the run
measures that. The first minute of a new production database is still planned without them."""
WORKERS_START_SECONDS = 60.0
"""How long `_measure` looks for the bot processes (to print their pids) before it goes on."""
BOT_STARTING_GRANT_BEANS = 10**9
"""The ledger's starting grant in a bench run (`MAHJONG_STARTING_GRANT_BEANS`)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mjctl.bench_system", description=__doc__)
    parser.add_argument("--tables", type=int, default=32, help="tables played at once (4 bots each)")
    parser.add_argument("--games", type=int, default=0, help="games per run (default: 2 per table)")
    parser.add_argument("--think-ms", type=int, default=100, help="the second run's think time per decision")
    parser.add_argument("--processes", type=int, default=2, help="bot processes")
    parser.add_argument(
        "--hold-idle-updates-ms",
        type=int,
        default=None,
        metavar="MS",
        help="the bots' PlayOptions.hold_idle_updates_ms (default: mjctl bots' own)",
    )
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--room", default="sichuan-novice")
    parser.add_argument("--engine-games", type=int, default=200, help="games of the pure engine benchmark")
    parser.add_argument("--runs", default="saturation,think", help="which runs: saturation, think, or both")
    parser.add_argument("--keep", action="store_true", help="keep the run's folder (logs, databases)")
    parser.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help="also write each run's figures (its table's) to PATH, keyed by run (for mjctl.bench_pair)",
    )
    arguments = parser.parse_args(argv)
    games = arguments.games or 2 * arguments.tables
    root = Path(tempfile.mkdtemp(prefix="mahjong-bench-system-"))
    summaries: dict[str, dict[str, Any]] = {}
    print(f"bench-system: {arguments.tables} tables, {games} games per run, {arguments.database}; in {root}")
    try:
        with _system(root, arguments.database) as environment:
            for run in arguments.runs.split(","):
                think_ms = 0 if run == "saturation" else arguments.think_ms
                figures = _measure(environment, root, arguments, games, think_ms)
                figures["engine_games_per_second"] = _engine_rate(arguments.engine_games)
                summaries[run] = run_summary(figures)
                _print_run(summaries[run], arguments.database)
                if arguments.json is not None:
                    write_json(arguments.json, summaries)
    finally:
        if not arguments.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


@contextlib.contextmanager
def _system(root: Path, database: str) -> Iterator[dict[str, str]]:
    """Kafka, the database and the four services; yields the environment the bots need."""
    from mahjong_infra import kafka

    kafka.fetch()
    broker = kafka.KafkaBroker.on_free_ports(root / "kafka")
    broker.start(die_with_parent=True)
    cluster = None
    try:
        environment = {
            **os.environ,
            "MAHJONG_DATA_DIR": str(root / "data"),
            "MAHJONG_KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
            "MAHJONG_TOPIC_PREFIX": f"bench{uuid.uuid4().hex[:6]}.",
            "MAHJONG_JWT_SECRET": secrets.token_hex(32),
            # No bot falls below the room's entry floor however many games it plays (with the
            # default grant one did after about 200 games, and its process stopped the run).
            "MAHJONG_STARTING_GRANT_BEANS": str(BOT_STARTING_GRANT_BEANS),
        }
        for name in SERVICES:
            environment[f"MAHJONG_{name.upper()}_GRPC_ADDRESS"] = f"127.0.0.1:{kafka.free_port()}"
            environment[f"MAHJONG_{name.upper()}_METRICS_ADDRESS"] = f"127.0.0.1:{kafka.free_port()}"
        if database == "postgresql":
            from mahjong_infra import postgres

            # In the system's temporary folder: its user must enter it.
            cluster = postgres.PostgresCluster(server_settings=POSTGRESQL_SETTINGS)
            cluster.start()
            for name in SERVICES:
                environment[f"MAHJONG_{name.upper()}_DATABASE_URL"] = cluster.create_database(f"bench_{name}")
        with _services(root, environment) as processes:
            pids = {name: process.pid for name, process in processes.items()}
            broker_pid = broker.running_pid()
            if broker_pid is not None:
                pids["kafka broker"] = broker_pid
            environment["BENCH_SERVICE_PIDS"] = json.dumps(pids)
            yield environment
    finally:
        if cluster is not None:
            cluster.stop()
        broker.stop()


@contextlib.contextmanager
def _services(root: Path, environment: dict[str, str]) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    from mahjong_platform.grpc_client import check_health

    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in SERVICES:
            log = (logs / f"{name}.log").open("ab")
            processes[name] = subprocess.Popen(
                [sys.executable, "-m", f"mahjong_{name}"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environment,
            )
        deadline = time.monotonic() + HEALTH_TIMEOUT_SECONDS
        for name in SERVICES:
            target = environment[f"MAHJONG_{name.upper()}_GRPC_ADDRESS"]
            while not check_health(target, timeout_seconds=1.0):
                if processes[name].poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{name} did not start; see {logs / (name + '.log')}")
                time.sleep(0.3)
        yield processes
    finally:
        for process in processes.values():
            process.send_signal(signal.SIGTERM)
        for process in processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _measure(
    environment: dict[str, str], root: Path, arguments: argparse.Namespace, games: int, think_ms: int
) -> dict[str, Any]:
    pids: dict[str, int] = json.loads(environment["BENCH_SERVICE_PIDS"])
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    traffic_before = traffic(environment)
    output = root / f"bots-{think_ms}.json"
    command = [
        sys.executable,
        "-m",
        "mjctl",
        "bots",
        "--room",
        arguments.room,
        "--players",
        str(4 * arguments.tables),
        "--games",
        str(games),
        "--settlement-lag",
        "--think-ms",
        str(think_ms),
        "--processes",
        str(arguments.processes),
        "--json",
        str(output),
    ]
    if arguments.hold_idle_updates_ms is not None:
        command += ["--hold-idle-updates-ms", str(arguments.hold_idle_updates_ms)]
    with (root / f"bots-{think_ms}.log").open("wb") as log:
        bots = subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT)
        try:
            workers = _worker_pids(bots, arguments.processes)
            print(_pids_line(pids, bots.pid, workers), flush=True)
            if bots.wait() != 0:
                raise subprocess.CalledProcessError(bots.returncode, command)
        finally:
            if bots.poll() is None:
                bots.kill()
                bots.wait()
    figures: dict[str, Any] = json.loads(output.read_text())
    figures["server_cpu_seconds"] = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    traffic_after = traffic(environment)
    figures["traffic"] = {
        name: {key: count - traffic_before[name][key] for key, count in counts.items()}
        for name, counts in traffic_after.items()
    }
    figures["load_average"] = os.getloadavg()
    return figures


TRAFFIC_COUNTERS = {
    "mahjong_grpc_server_handled_total": "calls",
    "mahjong_outbox_published_total": "records produced",
    "mahjong_outbox_rounds_total": "relay rounds",
    "mahjong_consumer_events_total": "records consumed",
    "mahjong_consumer_batches_total": "consumer batches",
}
"""A service's counters (`mahjong_platform.metrics`) that `traffic` reads: the calls it finished
(unary calls and streams; health checks apart), the outbox messages its relay published and the
rounds it published them in, the events its tracked consumers handled and the batches
(transactions) they applied them in."""


def traffic(environment: dict[str, str]) -> dict[str, dict[str, float]]:
    """Each service's traffic counters so far (`TRAFFIC_COUNTERS`), read from its `/metrics`."""
    from prometheus_client.parser import text_string_to_metric_families

    counts = {}
    for name in SERVICES:
        address = environment[f"MAHJONG_{name.upper()}_METRICS_ADDRESS"]
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
            text = response.read().decode()
        counts[name] = traffic_counts(text_string_to_metric_families(text))
    return counts


def traffic_counts(families: Iterable[Any]) -> dict[str, float]:
    """`TRAFFIC_COUNTERS` summed over their labels, from parsed metric families."""
    counts = dict.fromkeys(TRAFFIC_COUNTERS.values(), 0.0)
    for family in families:
        for sample in family.samples:
            key = TRAFFIC_COUNTERS.get(sample.name)
            if key is None or sample.labels.get("method", "").startswith("/grpc.health."):
                continue
            counts[key] += sample.value
    return counts


def _worker_pids(bots: subprocess.Popen[bytes], processes: int) -> list[int]:
    """The pids of the bot processes `mjctl bots` started (its children running
    `multiprocessing.spawn`), once all `processes` have started (or after `WORKERS_START_SECONDS`,
    or when it has ended): for profiling them while they play."""
    deadline = time.monotonic() + WORKERS_START_SECONDS
    workers: list[int] = []
    while bots.poll() is None and time.monotonic() < deadline:
        workers = [pid for pid in _children(bots.pid) if b"spawn_main" in _cmdline(pid)]
        if len(workers) >= processes:
            break
        time.sleep(0.1)
    return workers


def _children(pid: int) -> list[int]:
    """The pids of a process's children (Linux /proc; none once it has ended)."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            children += [int(child) for child in (task / "children").read_text().split()]
    return sorted(children)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _pids_line(services: dict[str, int], bots: int, workers: list[int]) -> str:
    """One line with the pids of the run's processes (to attach a profiler while the bots play)."""
    named = ", ".join(f"{name} {pid}" for name, pid in services.items())
    return f"pids: {named}; bots {bots} (bot processes {', '.join(map(str, workers)) or 'not found'})"


def _engine_rate(engine_games: int) -> float:
    """Games/s of the pure engine self-play, run now (the same load as the system run)."""
    result = subprocess.run(
        [sys.executable, "-m", "mahjong_table.bench", "--games", str(engine_games)],
        capture_output=True,
        text=True,
        check=True,
    )
    match = re.search(r"games_per_second\s+([\d,.]+)", result.stdout)
    assert match is not None, result.stdout
    return float(match.group(1).replace(",", ""))


def run_summary(figures: dict[str, Any]) -> dict[str, Any]:
    """One run's figures as its table prints them (per game, per command, the CPU sum, the ratio to
    the pure engine), computed once: `_print_run` prints this and ``--json`` writes it, so the file
    says what the table said and `mjctl.bench_pair` reads it instead of parsing the table."""
    games = max(1, figures["games"])
    rate = figures.get("games_settled_per_second", 0.0)
    cpu = {name: seconds / games for name, seconds in figures["server_cpu_seconds"].items()}
    cpu["bots"] = figures["client_cpu_seconds"] / games
    total = sum(figures["server_cpu_seconds"].values()) + figures["client_cpu_seconds"]
    cpu["everything"] = total / games
    engine = figures["engine_games_per_second"]
    summary: dict[str, Any] = {
        "tables": figures["tables"],
        "think_ms": figures["think_ms"],
        "hold_idle_updates_ms": figures.get("hold_idle_updates_ms"),
        "games": figures["games"],
        "unsettled": figures.get("unsettled", 0),
        "games_settled_per_second": rate,
        "act_p50_ms": figures["act_p50_ms"],
        "act_p99_ms": figures["act_p99_ms"],
        "delivery_p99_ms": figures["delivery_p99_ms"],
        "decision_delivery_p99_ms": figures.get("decision_delivery_p99_ms", 0.0),
        **{f"lag_{name}_ms": figures.get(f"lag_{name}_ms", 0) for name in ("p50", "p90", "p99", "max")},
        "lag_hops": figures.get("lag_hops") or {},
        "enqueue_refused_per_game": figures["enqueue_refused"] / games,
        "bot_processes": figures["processes"],
        "cpu_seconds_per_game": cpu,
        "engine_games_per_second": engine,
        "full_over_engine": rate / engine,
        "load_average": list(figures["load_average"]),
        "act_by_kind": figures.get("act_by_kind") or {},
    }
    if "traffic" in figures:
        summary["traffic_per_game"] = {
            name: {key: count / games for key, count in counts.items()}
            for name, counts in figures["traffic"].items()
        }
    if "play_opens" in figures:
        commands = max(1, figures["act_calls"])
        summary["play_opens_per_game"] = figures["play_opens"] / games
        summary["responses_per_command"] = figures["play_responses"] / commands
        summary["riding_answers_per_command"] = figures["play_riding_answers"] / commands
    return summary


def write_json(path: Path, summaries: dict[str, dict[str, Any]]) -> None:
    """``--json``: the runs' `run_summary`, keyed by run (``saturation``, ``think``); rewritten after
    each run, so a run that fails leaves the ones before it."""
    path.write_text(json.dumps(summaries, indent=2) + "\n", encoding="utf-8")


def _print_run(summary: dict[str, Any], database: str) -> None:
    rate = summary["games_settled_per_second"]
    title = "saturation" if not summary["think_ms"] else f"think {summary['think_ms']} ms"
    if summary["hold_idle_updates_ms"]:
        title += f", idle updates held <= {summary['hold_idle_updates_ms']} ms"
    rows = [
        ("games settled / s", f"{rate:.2f} ({summary['games']} games, {summary['unsettled']} unsettled)"),
        ("Act p50 / p99", f"{summary['act_p50_ms']:.1f} ms / {summary['act_p99_ms']:.1f} ms"),
        ("WatchView delivery p99", f"{summary['delivery_p99_ms']:.1f} ms"),
        (
            "WatchView delivery p99 of a decision (the last event of an update asking the bot)",
            f"{summary['decision_delivery_p99_ms']:.1f} ms",
        ),
        (
            "settlement lag p50 / p90 / p99 / max",
            " / ".join(f"{summary[f'lag_{name}_ms']:.0f}" for name in ("p50", "p90", "p99", "max")) + " ms",
        ),
    ]
    if summary["lag_hops"]:
        # Each hop's figures in order (`mjctl.lag.HOPS`), then the slowest game's hops.
        hops = {name: hop for name, hop in summary["lag_hops"].items() if name != "slowest"}
        slowest = summary["lag_hops"]["slowest"]
        rows.append(
            (
                "settlement lag by hop, p50 / p99: table; scoring; ledger",
                "; ".join(f"{hop['p50_ms']:.0f} / {hop['p99_ms']:.0f}" for hop in hops.values()) + " ms",
            )
        )
        rows.append(
            (
                "settlement lag of the slowest game by hop: table + scoring + ledger",
                " + ".join(f"{value:.0f}" for value in slowest.values())
                + f" = {sum(slowest.values()):.0f} ms",
            )
        )
    rows.append(("Enqueue refused / game (seat not freed yet)", f"{summary['enqueue_refused_per_game']:.2f}"))
    if "play_opens_per_game" in summary:
        rows.append(
            (
                "Play streams opened / game; responses / command (answers riding)",
                f"{summary['play_opens_per_game']:.2f}; {summary['responses_per_command']:.2f} "
                f"({summary['riding_answers_per_command']:.2f})",
            )
        )
    for name, counts in summary.get("traffic_per_game", {}).items():
        rounds = counts.get("relay rounds")  # a run before that counter has none
        rows.append(
            (
                f"{name} / game: calls; records out (relay rounds), in; consumer batches",
                f"{counts['calls']:.1f}; {counts['records produced']:.1f}"
                f" ({'–' if rounds is None else f'{rounds:.1f}'}),"
                f" {counts['records consumed']:.1f}; {counts['consumer batches']:.1f}",
            )
        )
    for name, seconds in summary["cpu_seconds_per_game"].items():
        if name == "bots":
            name = f"bots ({summary['bot_processes']} processes)"
        elif name == "everything":
            name = "everything (services, broker, bots)"
        rows.append((f"CPU s / game: {name}", f"{seconds:.3f}"))
    rows.append(("pure engine (same run)", f"{summary['engine_games_per_second']:.1f} games/s"))
    rows.append(("full system / pure engine", f"{summary['full_over_engine']:.4f}"))
    rows.append(("load average (1/5/15 min)", " ".join(f"{value:.2f}" for value in summary["load_average"])))
    print(f"\n| {summary['tables']} tables, {title}, {database} | |\n|---|---:|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    if summary["act_by_kind"]:
        from mjctl.load import act_kind_lines

        print("\n" + "\n".join(act_kind_lines(summary["act_by_kind"])))
    sys.stdout.flush()


if __name__ == "__main__":
    raise SystemExit(main())
