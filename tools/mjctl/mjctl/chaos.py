"""``mjctl chaos`` (what ``make chaos`` calls): seeded fault injection against the real servers.

It starts its own Kafka broker and the four services as supervised processes (``mjctl run``'s
supervisor) on free ports, with SQLite databases in a fresh directory, and lets bots play games
(``mjctl bots``' players, which reconnect and resume through ``mjctl.client``) while a seeded
schedule of faults hits the system at random moments:

- ``kill <service>``: SIGKILL the service's process; the supervisor starts it again;
- ``kill broker``: SIGKILL the Kafka broker (its whole process group), start it again;
- ``pause broker``: SIGSTOP the broker for a few seconds, then SIGCONT;
- ``full disk <service>``: restart the service with a file size limit (RLIMIT_FSIZE) so every
  write past the first 64 KiB of any file fails (EFBIG: its SQLite database cannot be written,
  WAL included) until its log shows a failed write (at most 30 s), then SIGKILL it and start it
  with the disk "freed". Only that process is limited; nothing else on the machine sees it.

When the bots are done it waits for the books to settle, then checks: every opened table ended;
every ended game settled exactly once (scoring's ``GameSettled``: lost = none, doubled = more than
one); no bot failed; ``mjctl reconcile`` is ok; ``mjctl rebuild scoring`` and ``mjctl rebuild
ledger`` are identical. It prints the faults and a summary table; exit 1 when any check fails.
The same seed gives the same fault schedule (the moments depend on the machine's speed too).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mjctl.run import SERVICES, ServiceProcesses

if TYPE_CHECKING:
    import grpc
    from mahjong_infra.kafka import KafkaBroker

FULL_DISK_FILE_BYTES = 64 * 1024
HEALTH_TIMEOUT_SECONDS = 120.0
SETTLE_TIMEOUT_SECONDS = 240.0
CHECK_TIMEOUT_SECONDS = 600.0
FULL_DISK_MAX_SECONDS = 30.0
FULL_DISK_MARKERS = ("disk i/o error", "database or disk is full", "file too large")
LIMIT_FILE_SIZE = """
import os, resource, signal, sys
log_path, limit, *command = sys.argv[1:]
log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
os.dup2(log, 1)
os.dup2(log, 2)
os.close(log)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), int(limit)))
os.execvp(command[0], command)
"""
"""``python -c LIMIT_FILE_SIZE LOG LIMIT COMMAND...``: COMMAND logging to LOG (a fresh file: the
usual log is already past the limit), its writes past LIMIT bytes of any file failing with EFBIG
(SIGXFSZ ignored, as Python does anyway; both survive the exec), which SQLite reports as an I/O
error."""


@dataclasses.dataclass(frozen=True)
class Fault:
    kind: str  # "kill", "pause" or "full disk"
    target: str  # a service name or "broker"

    def __str__(self) -> str:
        return f"{self.kind} {self.target}"


def fault_schedule(rng: random.Random, rounds: int, full_disk_service: str = "scoring") -> list[Fault]:
    """Each round: SIGKILL every service and the broker once, pause the broker once, fill one
    service's disk once; the order shuffled by the seeded ``rng``."""
    schedule: list[Fault] = []
    for _ in range(rounds):
        round_faults = [Fault("kill", name) for name in (*SERVICES, "broker")]
        round_faults += [Fault("pause", "broker"), Fault("full disk", full_disk_service)]
        rng.shuffle(round_faults)
        schedule.extend(round_faults)
    return schedule


@dataclasses.dataclass
class Books:
    """What the databases say after the run."""

    tables_opened: int
    tables_ended: int
    settled_once: int
    lost: list[str]  # ended, never settled
    doubled: list[str]  # settled more than once
    unended: list[str]  # opened, never ended
    unsent: int  # outbox messages not yet relayed, every service


@dataclasses.dataclass
class ChaosReport:
    seed: int
    faults: list[tuple[float, Fault]]
    games: int
    books: Books
    bot_failures: list[str]
    restarts: dict[str, int]
    retries: int
    full_disk_errors: int  # failed writes logged by the service on the full disk
    checks: dict[str, str]  # command → "ok" or its failure
    seconds: float

    @property
    def passed(self) -> bool:
        return (
            not self.books.lost
            and not self.books.doubled
            and not self.books.unended
            and not self.bot_failures
            and self.games > 0
            and all(result == "ok" for result in self.checks.values())
        )

    def lines(self) -> list[str]:
        counts = collections.Counter(str(fault) for _, fault in self.faults)
        rows = [
            ("seed", str(self.seed)),
            (
                "faults injected",
                f"{len(self.faults)} ({', '.join(f'{n}x {f}' for f, n in sorted(counts.items()))})",
            ),
            (
                "service restarts by the supervisor",
                ", ".join(f"{n} {c}" for n, c in sorted(self.restarts.items())),
            ),
            ("client calls retried", str(self.retries)),
            ("failed writes logged on the full disk", str(self.full_disk_errors)),
            ("games played by the bots", str(self.games)),
            ("tables opened / ended", f"{self.books.tables_opened} / {self.books.tables_ended}"),
            ("games settled exactly once", str(self.books.settled_once)),
            ("lost (ended, never settled)", str(len(self.books.lost))),
            ("doubled (settled twice)", str(len(self.books.doubled))),
            ("tables never ended", str(len(self.books.unended))),
            ("bots failed", str(len(self.bot_failures))),
            *((check, result) for check, result in self.checks.items()),
            ("wall time", f"{self.seconds:.0f} s"),
            ("result", "PASSED" if self.passed else "FAILED"),
        ]
        width = max(len(name) for name, _ in rows)
        return [f"| {name.ljust(width)} | {value} |" for name, value in rows]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("chaos", help="bot games while faults hit every service and the broker")
    parser.add_argument("--seed", type=int, default=1, help="seeds the fault schedule and its moments")
    parser.add_argument("--games", type=int, default=16, help="play at least this many games")
    parser.add_argument("--players", type=int, default=8, help="bots, a multiple of 4")
    parser.add_argument("--rounds", type=int, default=2, help="fault rounds (each hits everything once)")
    parser.add_argument("--room", default="sichuan-novice", help="room id the bots play in")
    parser.add_argument("--gap-seconds", type=float, default=4.0, help="mean pause between faults")
    parser.add_argument("--directory", help="keep data and logs here (default: a temporary directory)")
    parser.set_defaults(handler=_run)


def _run(arguments: argparse.Namespace) -> int:
    if arguments.players < 4 or arguments.players % 4:
        print("mjctl chaos: --players must be a positive multiple of 4", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack:
        directory = (
            Path(arguments.directory)
            if arguments.directory
            else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mahjong-chaos-")))
        )
        report = run_chaos(
            directory,
            seed=arguments.seed,
            games=arguments.games,
            players=arguments.players,
            rounds=arguments.rounds,
            room=arguments.room,
            gap_seconds=arguments.gap_seconds,
        )
        for line in report.lines():
            print(line)
        if not report.passed:
            print(f"mjctl chaos: FAILED; logs in {directory / 'logs'}", file=sys.stderr)
            for failure in report.bot_failures[:3]:
                print(f"  bot failure: {failure}", file=sys.stderr)
    return 0 if report.passed else 1


def run_chaos(
    directory: Path,
    seed: int,
    games: int,
    players: int,
    rounds: int,
    room: str = "sichuan-novice",
    gap_seconds: float = 4.0,
    echo: Callable[[str], None] = print,
) -> ChaosReport:
    """Play at least ``games`` games while ``rounds`` rounds of faults hit the system; check the
    books afterwards (see the module's docstring)."""
    from mahjong_infra import kafka

    started = time.monotonic()
    directory = directory.resolve()  # the broker runs in its own directory
    rng = random.Random(seed)
    schedule = fault_schedule(rng, rounds)
    logs = directory / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    kafka.fetch()
    broker = kafka.KafkaBroker.on_free_ports(directory / "kafka", default_partitions=3)
    env = _environment(directory, broker.bootstrap_servers)
    full_disk = FullDisk(logs)
    processes = ServiceProcesses(list(SERVICES), logs, echo=echo, prepare=full_disk.prepare, env=env)
    broker.start(die_with_parent=True)
    try:
        processes.start()
        try:
            _wait_healthy(env)
            echo(f"chaos: seed {seed}, {len(schedule)} faults, at least {games} games, {players} bots")
            injector = Injector(schedule, rng, gap_seconds, processes, broker, full_disk, env, echo)
            play = Play(room, players, games, env, injector.done, echo)
            injector.start()
            play.run()
            injector.join()
            _wait_healthy(env)
            books, checks = settle_and_check(env, echo)
        finally:
            processes.stop()
    finally:
        broker.stop()
    return ChaosReport(
        seed=seed,
        faults=injector.injected,
        games=play.games,
        bot_failures=play.failures,
        restarts=dict(processes.restarts),
        retries=play.retries,
        full_disk_errors=full_disk.errors_seen(),
        seconds=time.monotonic() - started,
        books=books,
        checks=checks,
    )


def _environment(directory: Path, bootstrap_servers: str) -> dict[str, str]:
    from mahjong_infra.kafka import free_port

    env = {key: value for key, value in os.environ.items() if not key.startswith("MAHJONG_")}
    env.update(
        {
            "MAHJONG_DATA_DIR": str(directory / "data"),
            "MAHJONG_KAFKA_BOOTSTRAP_SERVERS": bootstrap_servers,
            "MAHJONG_TOPIC_PARTITIONS": "3",
            "MAHJONG_JWT_SECRET": secrets.token_hex(24),
            "MAHJONG_LOG_LEVEL": "INFO",
        }
    )
    for name in SERVICES:
        env[f"MAHJONG_{name.upper()}_GRPC_ADDRESS"] = f"127.0.0.1:{free_port()}"
        # Not the default metrics ports: another system (make run) may be serving on them.
        env[f"MAHJONG_{name.upper()}_METRICS_ADDRESS"] = f"127.0.0.1:{free_port()}"
    return env


def _wait_healthy(env: dict[str, str]) -> None:
    from mahjong_platform.grpc_client import check_health

    deadline = time.monotonic() + HEALTH_TIMEOUT_SECONDS
    for name in SERVICES:
        target = env[f"MAHJONG_{name.upper()}_GRPC_ADDRESS"]
        while not check_health(target, timeout_seconds=1.0):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not report SERVING at {target}")
            time.sleep(0.2)


class FullDisk:
    """Which service's next start gets the file size limit (set by the injector); that start logs
    to ``<name>.full-disk.log`` (a fresh file: the usual log is already past the limit)."""

    def __init__(self, logs: Path) -> None:
        self._logs = logs
        self._limited: set[str] = set()
        self._lock = threading.Lock()

    def limit_next_start(self, name: str) -> None:
        with self._lock:
            self._limited.add(name)

    def prepare(self, name: str) -> Callable[[list[str]], list[str]] | None:
        """The next start of a limited service runs its command through `LIMIT_FILE_SIZE` (a
        fresh interpreter that sets the limit, then execs the command), not in a ``preexec_fn``:
        that would fork the supervisor, whose other threads are in gRPC (its fork handlers
        crashed the child before its exec now and then: "Fatal Python error: Aborted")."""
        with self._lock:
            if name not in self._limited:
                return None
            self._limited.discard(name)
        log_path = self.log_path(name)

        def limit_file_size(command: list[str]) -> list[str]:
            limit = str(FULL_DISK_FILE_BYTES)
            return [sys.executable, "-c", LIMIT_FILE_SIZE, str(log_path), limit, *command]

        return limit_file_size

    def log_path(self, name: str) -> Path:
        return self._logs / f"{name}.full-disk.log"

    def errors_seen(self) -> int:
        """Lines of the full-disk logs that report a failed write."""
        count = 0
        for path in self._logs.glob("*.full-disk.log"):
            text = path.read_text(encoding="utf-8", errors="replace").lower()
            count += sum(marker in line for line in text.splitlines() for marker in FULL_DISK_MARKERS)
        return count


class Injector:
    """Runs the fault schedule in a thread, one fault at a time, each after a random pause."""

    def __init__(
        self,
        schedule: list[Fault],
        rng: random.Random,
        gap_seconds: float,
        processes: ServiceProcesses,
        broker: KafkaBroker,
        full_disk: FullDisk,
        env: dict[str, str],
        echo: Callable[[str], None],
    ) -> None:
        self.injected: list[tuple[float, Fault]] = []
        self.done = threading.Event()
        self._schedule = schedule
        self._rng = rng
        self._gap_seconds = gap_seconds
        self._processes = processes
        self._broker = broker
        self._full_disk = full_disk
        self._env = env
        self._echo = echo
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="chaos-injector", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def join(self) -> None:
        self._thread.join()
        if self.error is not None:
            raise RuntimeError(f"the fault injector failed: {self.error!r}") from self.error

    def _run(self) -> None:
        try:
            for fault in self._schedule:
                time.sleep(self._rng.uniform(0.25, 1.75) * self._gap_seconds)
                moment = time.monotonic() - self._started
                self._echo(f"chaos: t={moment:6.1f} s  {fault}")
                self.injected.append((moment, fault))
                self._inject(fault)
        except BaseException as error:
            self.error = error
        finally:
            self.done.set()

    def _inject(self, fault: Fault) -> None:
        if fault.target == "broker":
            if fault.kind == "kill":
                self._kill_broker()
            else:
                self._pause_broker()
            return
        if fault.kind == "full disk":
            failed_writes_before = self._full_disk.errors_seen()
            self._full_disk.limit_next_start(fault.target)
            self._kill_service(fault.target)
            # It runs on the full disk until a write has failed (or FULL_DISK_MAX_SECONDS).
            deadline = time.monotonic() + FULL_DISK_MAX_SECONDS
            while self._full_disk.errors_seen() == failed_writes_before and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(self._rng.uniform(0.5, 2.0))
            self._kill_service(fault.target)  # the disk is "freed": the next start is unlimited
        else:
            self._kill_service(fault.target)
        _wait_healthy(self._env)

    def _kill_service(self, name: str) -> None:
        pid = self._wait_for_pid(name)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        while self._processes.pid(name) == pid:
            time.sleep(0.05)

    def _wait_for_pid(self, name: str) -> int:
        while (pid := self._processes.pid(name)) is None:
            time.sleep(0.05)
        return pid

    def _kill_broker(self) -> None:
        pid = self._broker_pid()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        time.sleep(self._rng.uniform(0.5, 3.0))
        self._broker._process = None
        self._broker.pid_file.unlink(missing_ok=True)
        # Not die_with_parent: Linux sends that signal when the *thread* that started it ends.
        self._broker.start()

    def _pause_broker(self) -> None:
        pid = self._broker_pid()
        os.killpg(pid, signal.SIGSTOP)
        try:
            time.sleep(self._rng.uniform(3.0, 8.0))
        finally:
            os.killpg(pid, signal.SIGCONT)

    def _broker_pid(self) -> int:
        pid = self._broker.running_pid()
        if pid is None:
            raise RuntimeError("the broker is not running")
        return int(pid)


class Play:
    """Bots play rounds of games until at least ``games`` are done and the injector has finished."""

    def __init__(
        self,
        room: str,
        players: int,
        games: int,
        env: dict[str, str],
        faults_done: threading.Event,
        echo: Callable[[str], None],
    ) -> None:
        self.games = 0
        self.retries = 0
        self.failures: list[str] = []
        self._room = room
        self._players = players
        self._wanted = games
        self._env = env
        self._faults_done = faults_done
        self._echo = echo

    def run(self) -> None:
        from mahjong_platform.auth import mint_token
        from mahjong_platform.grpc_client import open_channel

        from mjctl.bots import run_bots

        secret = self._env["MAHJONG_JWT_SECRET"]

        def channel_for(service: str, player_id: str) -> grpc.Channel:
            target = self._env[f"MAHJONG_{service.upper()}_GRPC_ADDRESS"]
            # Members of Happy Points, like every bot: --room may name a members-only Formula room.
            return open_channel(target, mint_token(secret, player_id, ttl_seconds=24 * 3600, member=True))

        batch = 0
        while self.games < self._wanted or not self._faults_done.is_set():
            batch += 1
            try:
                report = run_bots(
                    self._room,
                    self._players,
                    self._players // 4,
                    channel_for,
                    log=lambda _line: None,
                    player_prefix=f"chaos{batch}",
                )
            except Exception as error:  # counted, reported, and the run goes on
                self.failures.append(repr(error))
                self._echo(f"chaos: bots failed: {error!r}")
                continue
            self.games += len(report.games)
            self.retries += report.retries


def settle_and_check(env: dict[str, str], echo: Callable[[str], None]) -> tuple[Books, dict[str, str]]:
    """Wait until every ended game is settled and the books reconcile, then run the checks."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_SECONDS
    while True:
        books = read_books(env)
        reconcile = _mjctl(env, "reconcile")
        settled = not books.lost and not books.unsent and reconcile == "ok"
        if settled or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    echo("chaos: books settled; rebuilding scoring and ledger from the topics")
    checks = {
        "mjctl reconcile": reconcile,
        "mjctl rebuild scoring": _mjctl(env, "rebuild", "scoring"),
        "mjctl rebuild ledger": _mjctl(env, "rebuild", "ledger"),
    }
    if books.unsent:
        checks["outboxes drained"] = f"{books.unsent} messages unsent"
    return books, checks


def read_books(env: dict[str, str]) -> Books:
    """What the databases say: tables opened and ended (table store), games settled (scoring
    store), unsent outbox messages (every service)."""
    import sqlalchemy
    from mahjong_platform.config import load_settings
    from mahjong_platform.database import create_engine_for
    from mahjong_platform.envelopes import parse_envelope
    from mahjong_platform.schema import outbox_messages, stored_events

    settings = load_settings(env)
    events_by_type: dict[str, dict[str, list[str]]] = {}
    unsent = 0
    for name in SERVICES:
        engine = create_engine_for(settings.database_url(name))  # type: ignore[arg-type]
        try:
            with engine.connect() as connection:
                unsent += int(
                    connection.execute(
                        sqlalchemy.select(sqlalchemy.func.count()).where(outbox_messages.c.sent_at.is_(None))
                    ).scalar_one()
                )
                rows = connection.execute(
                    sqlalchemy.select(stored_events.c.event_type, stored_events.c.envelope).where(
                        stored_events.c.event_type.in_(("TableOpened", "GameEnded", "GameSettled"))
                    )
                )
                for event_type, data in rows:
                    envelope = parse_envelope(data)
                    table_id = (
                        envelope.game_settled.table_id if event_type == "GameSettled" else envelope.stream_id
                    )
                    events_by_type.setdefault(event_type, {}).setdefault(table_id, []).append(
                        envelope.event_id
                    )
        finally:
            engine.dispose()
    opened = events_by_type.get("TableOpened", {})
    ended = events_by_type.get("GameEnded", {})
    settled = events_by_type.get("GameSettled", {})
    return Books(
        tables_opened=len(opened),
        tables_ended=len(ended),
        settled_once=sum(len(settled.get(table_id, ())) == 1 for table_id in ended),
        lost=sorted(table_id for table_id in ended if not settled.get(table_id)),
        doubled=sorted(table_id for table_id, ids in settled.items() if len(ids) > 1),
        unended=sorted(set(opened) - set(ended)),
        unsent=unsent,
    )


def _mjctl(env: dict[str, str], *command: str) -> str:
    """Run ``mjctl <command>`` against the chaos system: "ok", or its last output lines."""
    completed = subprocess.run(
        [sys.executable, "-m", "mjctl", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_SECONDS,
        check=False,
    )
    if completed.returncode == 0:
        return "ok"
    said = completed.stdout.strip().splitlines() or completed.stderr.strip().splitlines()
    return "FAILED: " + " / ".join(said[-3:])
