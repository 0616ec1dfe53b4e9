"""``mjctl run`` (what ``make run`` calls): the whole system on this machine, and a demo.

Starts a local Kafka broker (jars fetched once from Maven Central), every service as its own
process (each migrates its SQLite database under ``MAHJONG_DATA_DIR`` on start), waits until each
reports SERVING, lets bots play a few games through the public API, prints what happened at each
table (with an ops token: full information), and keeps everything running until Ctrl-C
(``--exit-after-demo`` stops it all after the demo instead).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import grpc
    from mahjong_platform.config import ServiceName, Settings

SERVICES = ("ledger", "scoring", "table", "matchmaking")
HEALTH_TIMEOUT_SECONDS = 90.0
REPLICATED_SERVICES = ("ledger", "scoring", "table", "matchmaking")
"""The services that run as several processes on one PostgreSQL (README "Scale-out: replicas")."""
REPLICAS_MAX = 8
REPLICA_PORT_STEP = 100
"""Replica k (k >= 2) of a service listens on its configured gRPC and metrics ports + 100 * (k - 1)."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("run", help="start Kafka and every service, then play a demo")
    parser.add_argument(
        "--room", default="sichuan-novice", help="room of the demo games (default: sichuan-novice)"
    )
    parser.add_argument("--games", type=int, default=3, help="demo games (0: no demo)")
    parser.add_argument(
        "--formula-room", default="formula-fan", help="room of the one formula demo game ('' for none)"
    )
    parser.add_argument("--players", type=int, default=4, help="demo bots, a multiple of 4")
    parser.add_argument(
        "--shortfall-room",
        default=SHORTFALL_ROOM,
        help="room of the short-payer demo: bots start with --shortfall-beans until a game shows a "
        "short payment (RULES.md 1.9; '' for none)",
    )
    parser.add_argument("--shortfall-beans", type=int, default=SHORTFALL_BEANS, help="see --shortfall-room")
    parser.add_argument("--exit-after-demo", action="store_true", help="stop everything after the demo")
    parser.add_argument(
        "--replicas",
        type=int,
        default=1,
        help=f"processes of each of {', '.join(REPLICATED_SERVICES)} (1..{REPLICAS_MAX}); above 1 they "
        "share one PostgreSQL: the configured MAHJONG_<SERVICE>_DATABASE_URL, else a throwaway cluster "
        f"for this run; replica k listens on the service's ports + {REPLICA_PORT_STEP} * (k - 1)",
    )
    parser.set_defaults(handler=_run)


def replica_names(names: list[str], replicas: int) -> list[str]:
    """Process names: each service once, then ``<service>-<k>`` for k = 2..replicas of each."""
    assert 1 <= replicas <= REPLICAS_MAX, replicas
    extra = [f"{name}-{k}" for k in range(2, replicas + 1) for name in names if name in REPLICATED_SERVICES]
    return [*names, *extra]


def service_of(process_name: str) -> str:
    """The service a process name runs: ``scoring-2`` runs scoring."""
    return process_name.split("-", 1)[0]


def replica_environment(settings: Settings, process_name: str) -> dict[str, str]:
    """The variables that give replica k of a service its own gRPC and metrics ports."""
    from mahjong_platform.config import grpc_address_variable, metrics_address_variable

    service, _, number = process_name.partition("-")
    if not number:
        return {}
    offset = REPLICA_PORT_STEP * (int(number) - 1)
    name = service_name(service)
    return {
        grpc_address_variable(name): _shifted(settings.grpc_address(name), offset),
        metrics_address_variable(name): _shifted(settings.metrics_address(name), offset),
    }


def _shifted(address: str, offset: int) -> str:
    host, _, port = address.rpartition(":")
    return f"{host}:{int(port) + offset}"


def service_name(name: str) -> ServiceName:
    """`name` as a checked service name."""
    assert name in SERVICES, name
    return cast("ServiceName", name)


def requested_services() -> list[str]:
    """The names ``MAHJONG_RUN_SERVICES`` lists (comma separated), as given; [] when unset."""
    chosen = os.environ.get("MAHJONG_RUN_SERVICES", "")
    return [name.strip() for name in chosen.split(",") if name.strip()]


def installed_services() -> list[str]:
    """The services to start: ``MAHJONG_RUN_SERVICES`` (comma separated) or every installed one."""
    names = requested_services() or list(SERVICES)
    return [name for name in names if importlib.util.find_spec(f"mahjong_{name}.__main__") is not None]


def metrics_urls(settings: Settings, names: list[str]) -> list[str]:
    """Each service's /metrics URL as a person on this machine opens it."""
    urls = []
    for name in names:
        host, _, port = settings.metrics_address(service_name(name)).rpartition(":")
        if host in ("0.0.0.0", "[::]", "::"):
            host = "127.0.0.1"
        urls.append(f"{name} http://{host}:{port}/metrics")
    return urls


def _run(arguments: argparse.Namespace) -> int:
    from mahjong_platform.config import DEVELOPMENT, ENVIRONMENT_VARIABLE, load_settings

    if not 1 <= arguments.replicas <= REPLICAS_MAX:
        print(f"mjctl run: --replicas must be 1..{REPLICAS_MAX}", file=sys.stderr)
        return 2
    # A developer's machine: the services may start on the public development JWT secret (set
    # MAHJONG_ENV=production, or a real MAHJONG_JWT_SECRET, to run as in production).
    os.environ.setdefault(ENVIRONMENT_VARIABLE, DEVELOPMENT)
    settings = load_settings()
    data_directory = Path(settings.data_directory)
    logs = data_directory / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with (
        _shared_postgresql(settings, data_directory, arguments.replicas),
        _kafka(settings.kafka_bootstrap_servers, data_directory) as bootstrap_servers,
    ):
        settings = load_settings()
        print(f"kafka ready at {bootstrap_servers}")
        with _services(logs, settings, arguments.replicas) as names:
            _wait_healthy(settings, names)
            addresses = [f"{name} {_grpc_target(settings, name)}" for name in names]
            print(f"services serving: {', '.join(addresses)}")
            print(f"metrics (Prometheus): {', '.join(metrics_urls(settings, _services_only(names)))}")
            if arguments.games > 0:
                _demo(settings, arguments)
            if arguments.exit_after_demo:
                return 0
            print("play a game yourself in another terminal: .venv/bin/mjctl play --room sichuan-novice")
            print("replay any table in words: .venv/bin/mjctl replay --table ID")
            print("running; press Ctrl-C to stop (logs in", logs, ")")
            stopped = threading.Event()
            signal.signal(signal.SIGINT, lambda *_: stopped.set())
            signal.signal(signal.SIGTERM, lambda *_: stopped.set())
            stopped.wait()
    return 0


def _services_only(names: list[str]) -> list[str]:
    return [name for name in names if "-" not in name]


def _grpc_target(settings: Settings, process_name: str) -> str:
    from mahjong_platform.config import grpc_address_variable

    service = service_name(service_of(process_name))
    shifted = replica_environment(settings, process_name).get(grpc_address_variable(service))
    return settings.grpc_target(service) if shifted is None else shifted


@contextlib.contextmanager
def _shared_postgresql(settings: Settings, data_directory: Path, replicas: int) -> Iterator[None]:
    """Replicas share one database per service: PostgreSQL. A replicated service configured with
    SQLite gets a database in a throwaway cluster under the data directory, for this run only."""
    from mahjong_platform.config import database_url_variable

    on_sqlite = [
        name
        for name in REPLICATED_SERVICES
        if replicas > 1 and settings.database_url(service_name(name)).startswith("sqlite")
    ]
    if not on_sqlite:
        yield
        return
    from mahjong_infra.postgres import PostgresCluster

    print(f"starting a throwaway PostgreSQL for the replicas of {', '.join(on_sqlite)}...")
    with PostgresCluster(base_dir=data_directory / "postgresql") as cluster:
        for name in on_sqlite:
            os.environ[database_url_variable(service_name(name))] = cluster.create_database(f"mahjong_{name}")
        yield


@contextlib.contextmanager
def _kafka(bootstrap_servers: tuple[str, ...], data_directory: Path) -> Iterator[str]:
    """A broker at the configured address: reuse one that is running, else start ours (and stop it
    on the way out)."""
    from mahjong_infra import kafka

    host, _, port = bootstrap_servers[0].rpartition(":")
    kafka_directory = data_directory / "kafka"
    broker = kafka.KafkaBroker(
        data_dir=kafka_directory,
        host=host,
        port=int(port),
        controller_port=kafka_controller_port(kafka_directory, host, int(port)),
    )
    if broker.running_pid() is not None or kafka._port_is_open(host, int(port)):
        yield broker.bootstrap_servers
        return
    print("starting kafka (the first run fetches the broker jars from Maven Central)...")
    kafka.fetch()
    broker.start()
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


def kafka_controller_port(kafka_directory: Path, host: str, broker_port: int) -> int:
    """The KRaft controller port of the broker `mjctl run` starts: the one recorded in the data
    directory's ``server.properties`` by an earlier run (its storage names that endpoint) when it is
    still free, else one the OS picks now. Never a fixed port: another broker on this machine may
    hold 9093 (Kafka's default), and the broker would then fail to start."""
    from mahjong_infra import kafka

    recorded = _recorded_controller_port(kafka_directory / "server.properties")
    if recorded is not None and recorded != broker_port and not kafka._port_is_open(host, recorded):
        return recorded
    controller_port: int = kafka.free_port(host)
    while controller_port == broker_port:
        controller_port = kafka.free_port(host)
    return controller_port


def _recorded_controller_port(properties_path: Path) -> int | None:
    try:
        lines = properties_path.read_text().splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "controller.quorum.bootstrap.servers":
            port = value.strip().rpartition(":")[2]
            return int(port) if port.isdigit() else None
    return None


RESTART_FIRST_PAUSE_SECONDS = 0.5
RESTART_MAX_PAUSE_SECONDS = 30.0
STABLE_AFTER_SECONDS = 60.0  # a process up this long has its backoff reset
WATCH_INTERVAL_SECONDS = 0.2
STOP_GRACE_SECONDS = 30.0


class ServiceProcesses:
    """Every service as its own process, supervised: one that exits (crash, OOM kill, SIGKILL) is
    started again after a pause that doubles on each quick death (0.5 s up to 30 s, reset once it
    has stayed up a minute), and each restart is printed. ``stop`` ends them all (SIGTERM, then
    SIGKILL after the grace) and restarts nothing afterwards.

    ``prepare(name)`` (optional) returns how to wrap the command line of the next start of that
    service (used by ``mjctl chaos`` to start one with a file size limit), or None: never code to
    run in a forked child (``preexec_fn``), which forks this process with its threads in gRPC, whose
    fork handlers crashed the child before its exec now and then. ``command(name)``
    is the command line (default: ``python -m mahjong_<service>``, ``scoring-2`` being replica 2 of
    scoring); ``env`` their environment (default: this process's), updated with ``env_for(name)``
    (a replica's own ports, see `replica_environment`).
    """

    def __init__(
        self,
        names: list[str],
        logs: Path,
        echo: Callable[[str], None] = print,
        prepare: Callable[[str], Callable[[list[str]], list[str]] | None] | None = None,
        command: Callable[[str], list[str]] | None = None,
        env: dict[str, str] | None = None,
        env_for: Callable[[str], dict[str, str]] | None = None,
    ) -> None:
        self.names = list(names)
        self.restarts: Counter[str] = Counter()
        self._logs = logs
        self._echo = echo
        self._prepare = prepare
        self._env = env
        self._command = command or (lambda name: [sys.executable, "-m", f"mahjong_{service_of(name)}"])
        self._env_for = env_for
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self._started_at: dict[str, float] = {}
        self._pause: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="service-supervisor", daemon=True)

    def start(self) -> None:
        """Start every service and the watcher that restarts them."""
        for name in self.names:
            self._spawn(name)
        self._watcher.start()

    def pid(self, name: str) -> int | None:
        """The running process of ``name`` (None while it is down)."""
        with self._lock:
            process = self._processes.get(name)
            return None if process is None or process.poll() is not None else process.pid

    def stop(self) -> None:
        """SIGTERM every service, SIGKILL the ones still up after the grace; restart nothing."""
        self._stopping.set()
        if self._watcher.is_alive():
            self._watcher.join()
        with self._lock:
            processes = list(self._processes.values())
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _spawn(self, name: str) -> None:
        wrap = None if self._prepare is None else self._prepare(name)
        command = self._command(name)
        env = os.environ.copy() if self._env is None else dict(self._env)
        if self._env_for is not None:
            env.update(self._env_for(name))
        with (self._logs / f"{name}.log").open("ab") as log_file:
            process = subprocess.Popen(
                command if wrap is None else wrap(command),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
            )
        with self._lock:
            self._processes[name] = process
            self._started_at[name] = time.monotonic()

    def _watch(self) -> None:
        restart_due: dict[str, float] = {}
        while not self._stopping.wait(WATCH_INTERVAL_SECONDS):
            for name in self.names:
                with self._lock:
                    process = self._processes[name]
                if name in restart_due:
                    if time.monotonic() >= restart_due[name]:
                        del restart_due[name]
                        self.restarts[name] += 1
                        self._spawn(name)
                        self._echo(f"supervisor: {name} restarted (restart {self.restarts[name]})")
                    continue
                if process.poll() is None:
                    continue
                restart_due[name] = time.monotonic() + self._next_pause(name)
                self._echo(
                    f"supervisor: {name} (pid {process.pid}) {describe_exit(process.returncode)}; "
                    f"restarting in {restart_due[name] - time.monotonic():.1f} s"
                )

    def _next_pause(self, name: str) -> float:
        """Double the pause for a process that died soon after its start; reset it after a stable run."""
        up_seconds = time.monotonic() - self._started_at[name]
        previous = self._pause.get(name)
        if previous is None or up_seconds >= STABLE_AFTER_SECONDS:
            pause = RESTART_FIRST_PAUSE_SECONDS
        else:
            pause = min(previous * 2, RESTART_MAX_PAUSE_SECONDS)
        self._pause[name] = pause
        return pause


def describe_exit(returncode: int) -> str:
    """ "exited with status 1" or "was killed by SIGKILL"."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


@contextlib.contextmanager
def _services(logs: Path, settings: Settings, replicas: int) -> Iterator[list[str]]:
    names = replica_names(installed_services(), replicas)
    processes = ServiceProcesses(names, logs, env_for=lambda name: replica_environment(settings, name))
    processes.start()
    try:
        yield processes.names
    finally:
        processes.stop()


def _wait_healthy(settings: Settings, names: list[str]) -> None:
    from mahjong_platform.grpc_client import check_health

    deadline = time.monotonic() + HEALTH_TIMEOUT_SECONDS
    for name in names:
        target = _grpc_target(settings, name)
        while not check_health(target, timeout_seconds=1.0):
            if time.monotonic() > deadline:
                raise SystemExit(f"{name} did not report SERVING at {target}; see data/logs/{name}.log")
            time.sleep(0.3)


SHORTFALL_ROOM = "sichuan-cap64-practice"
SHORTFALL_BEANS = 150
SHORTFALL_ATTEMPTS = 3


def _demo(settings: Settings, arguments: argparse.Namespace) -> None:
    from mahjong_platform.auth import mint_token
    from mahjong_platform.grpc_client import open_channel

    from mjctl.bots import run_bots, starting_balance_funder
    from mjctl.lag import settlement_lag_probe
    from mjctl.summary import money_lines, print_table_summary, shortfall_lines

    secret = settings.jwt_secret

    def channel_for(service: str, player_id: str) -> grpc.Channel:
        # Demo bots are Happy Points members: the Formula demo room is members-only (RULES.md 3).
        token = mint_token(secret, player_id, member=True)
        return open_channel(settings.grpc_target(service_name(service)), token)

    finance = open_channel(settings.grpc_target("ledger"), mint_token(secret, "demo-finance", ["finance"]))
    probe = settlement_lag_probe(settings, lambda: finance) if "ledger" in installed_services() else None
    on_game_ended = None if probe is None else probe.game_ended
    print(f"demo: {arguments.players} bots play {arguments.games} games in room {arguments.room}")
    report = run_bots(
        arguments.room,
        arguments.players,
        arguments.games,
        channel_for,
        log=lambda _line: None,
        on_game_ended=on_game_ended,
    )
    operations = open_channel(settings.grpc_target("table"), mint_token(secret, "demo-ops", ["ops"]))
    for table_id in report.table_ids:
        print_table_summary(operations, table_id)
    for line in report.summary_lines():
        print(line)
    if arguments.formula_room:
        # Issue 6: one formula game too, after the Sichuan games.
        print(f"demo: {arguments.players} bots play 1 game in room {arguments.formula_room}")
        formula = run_bots(
            arguments.formula_room,
            arguments.players,
            1,
            channel_for,
            log=lambda _line: None,
            on_game_ended=on_game_ended,
        )
        for table_id in formula.table_ids:
            print_table_summary(operations, table_id)
        for line in formula.summary_lines():
            print(line)
        report.table_ids.extend(formula.table_ids)
    if arguments.shortfall_room and probe is not None:
        # Issue 15: players with a few beans in a 64-cap room, until one runs short (RULES.md 1.9).
        fund = starting_balance_funder(finance, arguments.shortfall_beans)
        for attempt in range(1, SHORTFALL_ATTEMPTS + 1):
            print(
                f"demo: {arguments.players} bots holding {arguments.shortfall_beans} beans each play "
                f"in room {arguments.shortfall_room} (attempt {attempt})"
            )
            short = run_bots(
                arguments.shortfall_room,
                arguments.players,
                1,
                channel_for,
                log=lambda _line: None,
                on_game_ended=on_game_ended,
                fund=fund,
            )
            for table_id in short.table_ids:
                print_table_summary(operations, table_id)
            report.table_ids.extend(short.table_ids)
            lines = [line for table_id in short.table_ids for line in shortfall_lines(finance, table_id)]
            for line in lines:
                print(line)
            if lines:
                break
    if probe is not None:
        for line in money_lines(finance, report.table_ids):
            print(line)
        print(probe.summary_line())
