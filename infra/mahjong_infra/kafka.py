"""A real Apache Kafka 4.x broker on this machine, without docker.

`fetch()` asks Maven for the broker jars pinned in `infra/kafka/pom.xml` and caches them (once);
`KafkaBroker` formats KRaft storage and runs one combined broker + controller on 127.0.0.1 as a
child JVM in its own process group, waits until a client's metadata request succeeds, and stops
it cleanly. The CLI (`python -m mahjong_infra.kafka start|stop|status|fetch`) leaves a detached
broker running for `make run`; the pytest plugin starts one per test session on free ports.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import functools
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
KAFKA_CONFIG_DIR = REPOSITORY_ROOT / "infra" / "kafka"
POM_PATH = KAFKA_CONFIG_DIR / "pom.xml"
LOG4J2_CONFIG_PATH = KAFKA_CONFIG_DIR / "log4j2.properties"

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9092
DEFAULT_CONTROLLER_PORT = 9093
DEFAULT_HEAP = "512m"
DEFAULT_START_TIMEOUT_S = 90.0
DEFAULT_STOP_TIMEOUT_S = 30.0
MINIMUM_JAVA_MAJOR = 17
FETCH_TIMEOUT_S = 1800.0
LOG_TAIL_LINES = 40

PID_FILE_NAME = "broker.pid"
CACHE_COMPLETE_MARKER = ".complete"

logger = logging.getLogger(__name__)


class KafkaInfraError(RuntimeError):
    """The local broker could not be fetched, started or stopped; the message says what to do."""


# --- versions and the jar cache -----------------------------------------------------------------


def pinned_version() -> str:
    """The Kafka version pinned in infra/kafka/pom.xml (the one `fetch()` downloads)."""
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM_PATH.read_text(encoding="utf-8"))
    if match is None:
        raise KafkaInfraError(f"{POM_PATH} has no <kafka.version> property")
    return match.group(1).strip()


def cache_root() -> Path:
    """Where fetched artifacts live: $MAHJONG_CACHE_DIR, else `.cache/` at the repository root."""
    configured = os.environ.get("MAHJONG_CACHE_DIR")
    return Path(configured) if configured else REPOSITORY_ROOT / ".cache"


def libs_dir(kafka_version: str | None = None) -> Path:
    """The folder holding the broker's classpath for one Kafka version."""
    return cache_root() / "kafka" / (kafka_version or pinned_version()) / "libs"


def version(libs: Path | None = None) -> str:
    """The version of the broker on the classpath, read from the `kafka_2.13-<version>.jar` name."""
    folder = libs or libs_dir()
    for jar in sorted(folder.glob("kafka_2.13-*.jar")):
        match = re.fullmatch(r"kafka_2\.13-(\d[\w.\-]*)\.jar", jar.name)
        if match is not None:
            return match.group(1)
    raise KafkaInfraError(
        f"no kafka_2.13-<version>.jar in {folder}; run `python -m mahjong_infra.kafka fetch`"
    )


def _require_tool(name: str, install_hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise KafkaInfraError(f"`{name}` not found on PATH: install {install_hint}")
    return path


@contextlib.contextmanager
def _exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Serialises fetches across processes (two test sessions on one machine share the cache)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def fetch(*, quiet: bool = True) -> Path:
    """Download the pinned broker jars with Maven into the cache, once; return the libs folder.

    A marker file records a complete fetch, so later calls (and later test sessions) never touch
    Maven or the network. Jars are copied to a temporary folder and renamed into place, so an
    interrupted fetch never leaves a half-filled classpath behind.
    """
    kafka_version = pinned_version()
    target = libs_dir(kafka_version)
    marker = target / CACHE_COMPLETE_MARKER
    if marker.exists():
        return target
    with _exclusive_lock(target.parent / ".fetch.lock"):
        if marker.exists():  # another process finished the fetch while we waited
            return target
        maven = _require_tool("mvn", "Maven 3.8+ (Debian: apt-get install -y maven)")
        staging = Path(tempfile.mkdtemp(prefix="libs.", dir=target.parent))
        command = [
            maven,
            "-B",
            *(["-q"] if quiet else []),
            "-f",
            str(POM_PATH),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
        ]
        logger.info("fetching Apache Kafka %s jars with Maven into %s", kafka_version, target)
        try:
            completed = subprocess.run(
                command, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired as error:
            shutil.rmtree(staging, ignore_errors=True)
            raise KafkaInfraError(f"Maven did not finish within {FETCH_TIMEOUT_S:.0f} s") from error
        if completed.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            output = (completed.stdout + completed.stderr)[-4000:]
            raise KafkaInfraError(f"`{' '.join(command)}` failed ({completed.returncode}):\n{output}")
        version(staging)  # asserts the broker jar is really there
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        marker.write_text(f"{kafka_version}\n", encoding="utf-8")
    return target


# --- java ---------------------------------------------------------------------------------------


@functools.cache
def java_executable() -> str:
    """A Java 17+ runtime: $JAVA_HOME/bin/java if set, else `java` on PATH (checked once)."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if candidate is None or not Path(candidate).exists():
        raise KafkaInfraError(
            "no Java runtime: install Java 17+ (Debian: apt-get install -y openjdk-17-jre-headless) "
            "or set JAVA_HOME"
        )
    completed = subprocess.run([candidate, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', completed.stderr)
    if match is None:
        raise KafkaInfraError(f"cannot read the version of {candidate}: {completed.stderr.strip()}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_392" style
        major = int(match.group(2))
    if major < MINIMUM_JAVA_MAJOR:
        raise KafkaInfraError(f"{candidate} is Java {major}; the Kafka 4.x broker needs Java 17+")
    return candidate


# --- ports and cluster ids ----------------------------------------------------------------------


_HANDED_OUT: set[int] = set()
"""The ports `free_port` gave this process: the OS may offer a port again once its probe is
closed, and two services given the same port (a gRPC and a metrics address) refuse to start."""


def free_port(host: str = DEFAULT_HOST) -> int:
    """A TCP port that was free a moment ago and that this process was not given before (the OS
    picks it; racy only against other processes' pickers)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
            port: int = probe.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def _terminate_when_parent_dies() -> None:
    """In the child before exec: ask Linux for SIGTERM when the parent process exits."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def random_cluster_id() -> str:
    """A KRaft cluster id: URL-safe base64 of 16 random bytes, without padding (as `random-uuid`)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


def _port_is_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) still answers signal 0: treat it as gone.
    with contextlib.suppress(OSError):
        status = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
        if status.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _is_kafka_process(pid: int) -> bool:
    """Guards against a stale pid file whose pid now belongs to an unrelated process."""
    try:
        command_line = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"kafka.Kafka" in command_line


# --- the broker ---------------------------------------------------------------------------------


@dataclass
class KafkaBroker:
    """One single-node KRaft broker (combined broker + controller roles) rooted at `data_dir`.

    Layout of `data_dir`: `server.properties`, `kraft/` (log.dirs, formatted once), `logs/` (the
    broker's log4j2 files), `stdout.log` (the JVM's own output), `broker.pid`.
    """

    data_dir: Path
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    controller_port: int = DEFAULT_CONTROLLER_PORT
    heap: str = DEFAULT_HEAP
    default_partitions: int = 1
    libs: Path | None = None
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @classmethod
    def on_free_ports(cls, data_dir: Path, **options: object) -> KafkaBroker:
        """A broker on two OS-chosen free ports, for tests running next to other brokers."""
        port = free_port()
        controller_port = free_port()
        while controller_port == port:
            controller_port = free_port()
        return cls(data_dir=data_dir, port=port, controller_port=controller_port, **options)  # type: ignore[arg-type]

    # paths ------------------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def properties_path(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def log_dirs(self) -> Path:
        return self.data_dir / "kraft"

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def server_log_path(self) -> Path:
        return self.logs_dir / "server.log"

    @property
    def stdout_path(self) -> Path:
        return self.data_dir / "stdout.log"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / PID_FILE_NAME

    @property
    def version(self) -> str:
        return version(self._libs())

    def _libs(self) -> Path:
        return self.libs if self.libs is not None else libs_dir()

    def _ensure_libs(self) -> None:
        if self.libs is None:
            fetch()
        elif not (self.libs / CACHE_COMPLETE_MARKER).exists() and not any(self.libs.glob("kafka_2.13-*.jar")):
            raise KafkaInfraError(f"{self.libs} holds no Kafka broker jars")

    # configuration ----------------------------------------------------------------------------

    def server_properties(self) -> dict[str, str]:
        """The broker configuration: single node, replication factors 1 everywhere, no auto topics."""
        controller = f"{self.host}:{self.controller_port}"
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": controller,
            "listeners": f"PLAINTEXT://{self.bootstrap_servers},CONTROLLER://{controller}",
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap_servers}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.log_dirs),
            "num.partitions": str(self.default_partitions),
            "default.replication.factor": "1",
            "min.insync.replicas": "1",
            "offsets.topic.replication.factor": "1",
            # The default 50 partitions make the first consumer group of a fresh broker take many
            # seconds to form on a small machine; a single-node broker gains nothing from them.
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # Tests start consumer groups constantly; the default 3 s delay would slow every one.
            "group.initial.rebalance.delay.ms": "0",
            # The active controller appends a no-op record to the metadata log this often when
            # nothing else is written (default 500 ms), and the broker side of the same process
            # fetches and applies each one: a single-node development broker has no follower whose
            # liveness it shows. Idle broker CPU 0.022-0.028 -> 0.014 s/s at 5000 ms (this box).
            "metadata.max.idle.interval.ms": "5000",
            # Thread counts for a development broker on a small machine (defaults 3 network and 8
            # request handler threads, 10 background): the clients of one test or `make run` send
            # a few dozen requests a second, and extra threads only take turns on the same cores.
            "num.network.threads": "1",
            "num.io.threads": "2",
            "background.threads": "2",
            # Topics are created by code (the platform library) with explicit partition counts.
            "auto.create.topics.enable": "false",
            "log.retention.hours": "168",
            "log.segment.bytes": str(64 * 1024 * 1024),
        }

    def write_properties(self) -> None:
        lines = [f"{key}={value}" for key, value in self.server_properties().items()]
        self.properties_path.write_text(
            "# Written by mahjong_infra.kafka; regenerated on every start.\n" + "\n".join(lines) + "\n",
            encoding="utf-8",
        )

    def _java_command(self, main_class: str, *arguments: str) -> list[str]:
        return [
            java_executable(),
            f"-Xmx{self.heap}",
            "-Xms64m",
            # A development broker on a shared 2-core machine: the serial collector and the C1
            # compiler alone start about 25 % faster and use fewer threads; the peak throughput they
            # give up is far beyond what tests and `make run` produce.
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={self.logs_dir}",
            f"-Dlog4j2.configurationFile={LOG4J2_CONFIG_PATH}",
            "-cp",
            str(self._libs() / "*"),
            main_class,
            *arguments,
        ]

    # lifecycle --------------------------------------------------------------------------------

    def is_formatted(self) -> bool:
        return (self.log_dirs / "meta.properties").exists()

    def format(self, cluster_id: str | None = None) -> None:
        """Format KRaft storage once (`StorageTool format --standalone`); later starts reuse it."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(exist_ok=True)
        self.write_properties()
        if self.is_formatted():
            return
        command = self._java_command(
            "kafka.tools.StorageTool",
            "format",
            "--standalone",
            # One argument: a random id may start with "-", which a separate value would not survive.
            f"--cluster-id={cluster_id or random_cluster_id()}",
            "-c",
            str(self.properties_path),
        )
        completed = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if completed.returncode != 0:
            raise KafkaInfraError(
                f"formatting KRaft storage in {self.log_dirs} failed ({completed.returncode}):\n"
                f"{completed.stdout}{completed.stderr}"
            )

    def running_pid(self) -> int | None:
        """The pid from the pid file when that process is still alive, else None."""
        try:
            pid = int(self.pid_file.read_text(encoding="ascii").strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if _process_alive(pid) and _is_kafka_process(pid) else None

    def start(self, *, timeout_s: float = DEFAULT_START_TIMEOUT_S, die_with_parent: bool = False) -> None:
        """Start the broker in its own process group and return once clients can use it.

        `die_with_parent` (Linux): the broker gets SIGTERM when the starting process dies, even by
        SIGKILL, so a test session that is killed (a CI timeout) leaves no broker behind.
        """
        if self.running_pid() is not None:
            raise KafkaInfraError(
                f"a broker from {self.data_dir} is already running (pid {self.running_pid()})"
            )
        for port in (self.port, self.controller_port):
            if _port_is_open(self.host, port):
                raise KafkaInfraError(f"port {self.host}:{port} is already in use; stop what listens there")
        self._ensure_libs()
        self.format()
        command = self._java_command("kafka.Kafka", str(self.properties_path))
        with self.stdout_path.open("ab") as stdout:
            # start_new_session: the broker is its own process group, so Ctrl-C in a terminal or
            # pytest's own signal handling never reaches it; we stop it explicitly.
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,
                preexec_fn=_terminate_when_parent_dies if die_with_parent else None,
            )
        self.pid_file.write_text(f"{self._process.pid}\n", encoding="ascii")
        try:
            self.wait_ready(timeout_s=timeout_s)
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, *, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> None:
        """Poll with a kafka-python metadata request until it succeeds; fail with the log tail."""
        from kafka.admin import KafkaAdminClient  # kafka-python is only needed once a broker runs

        deadline = time.monotonic() + timeout_s
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            pid = self._process.pid if self._process is not None else self.running_pid()
            exited = self._process.poll() is not None if self._process is not None else pid is None
            if exited:
                raise KafkaInfraError(f"the broker exited during start-up.\n{self.log_tail()}")
            if _port_is_open(self.host, self.port):
                try:
                    admin = KafkaAdminClient(
                        bootstrap_servers=self.bootstrap_servers,
                        request_timeout_ms=5000,
                        bootstrap_timeout_ms=5000,
                    )
                    try:
                        admin.describe_cluster()
                    finally:
                        admin.close()
                    return
                except Exception as error:  # any client failure just means "not yet"
                    last_error = error
            time.sleep(0.2)
        raise KafkaInfraError(
            f"the broker at {self.bootstrap_servers} did not answer a metadata request within "
            f"{timeout_s:.0f} s (last error: {last_error!r}).\n{self.log_tail()}"
        )

    def stop(self, *, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:
        """SIGTERM the broker's process group (a clean controlled shutdown), SIGKILL after timeout_s."""
        pid = self._process.pid if self._process is not None else self.running_pid()
        if pid is not None:
            self._signal_group(pid, signal.SIGTERM)
            if not self._wait_exit(pid, timeout_s):
                logger.warning("broker pid %d ignored SIGTERM for %.0f s; killing it", pid, timeout_s)
                self._signal_group(pid, signal.SIGKILL)
                self._wait_exit(pid, 10.0)
        self._process = None
        self.pid_file.unlink(missing_ok=True)

    @staticmethod
    def _signal_group(pid: int, signal_number: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal_number)

    def _wait_exit(self, pid: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process is not None:
                if self._process.poll() is not None:
                    return True
            elif not _process_alive(pid):
                return True
            time.sleep(0.1)
        return False

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of the broker log and of the JVM's stdout, for error messages."""
        parts = []
        for path in (self.server_log_path, self.stdout_path):
            if path.exists():
                text = path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
                parts.append(f"--- last {len(text)} lines of {path} ---\n" + "\n".join(text))
        return "\n".join(parts) if parts else f"(no broker log under {self.data_dir})"

    def __enter__(self) -> KafkaBroker:
        self.start()
        return self

    def __exit__(
        self,
        exception_type: type[BaseException] | None,
        exception: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


# --- command line -------------------------------------------------------------------------------


def default_data_dir() -> Path:
    """The CLI broker's folder: $MAHJONG_KAFKA_DIR, else data/kafka at the repository root."""
    configured = os.environ.get("MAHJONG_KAFKA_DIR")
    return Path(configured) if configured else REPOSITORY_ROOT / "data" / "kafka"


def _broker_from_arguments(arguments: argparse.Namespace) -> KafkaBroker:
    return KafkaBroker(
        data_dir=Path(arguments.data_dir),
        port=arguments.port,
        controller_port=arguments.controller_port,
        heap=arguments.heap,
        default_partitions=arguments.partitions,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mahjong_infra.kafka", description=__doc__)
    parser.add_argument("command", choices=["start", "stop", "status", "fetch", "version"])
    parser.add_argument("--data-dir", default=str(default_data_dir()))
    parser.add_argument("--port", type=int, default=int(os.environ.get("MAHJONG_KAFKA_PORT", DEFAULT_PORT)))
    parser.add_argument(
        "--controller-port",
        type=int,
        default=int(os.environ.get("MAHJONG_KAFKA_CONTROLLER_PORT", DEFAULT_CONTROLLER_PORT)),
    )
    parser.add_argument("--heap", default=DEFAULT_HEAP, help="JVM maximum heap, e.g. 512m")
    parser.add_argument("--partitions", type=int, default=1, help="num.partitions for auto-sized topics")
    parser.add_argument("--timeout", type=float, default=DEFAULT_START_TIMEOUT_S, help="seconds")
    arguments = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)  # kafka-python narrates every connection
    try:
        return _run_command(arguments)
    except KafkaInfraError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


def _run_command(arguments: argparse.Namespace) -> int:
    if arguments.command == "fetch":
        started = time.monotonic()
        folder = fetch(quiet=False)
        print(f"kafka {version(folder)}: {folder} ({time.monotonic() - started:.1f} s)")
        return 0
    if arguments.command == "version":
        print(version(fetch()))
        return 0
    broker = _broker_from_arguments(arguments)
    pid = broker.running_pid()
    if arguments.command == "status":
        state = f"running (pid {pid}) at {broker.bootstrap_servers}" if pid else "not running"
        print(f"kafka broker in {broker.data_dir}: {state}")
        return 0 if pid else 3
    if arguments.command == "stop":
        if pid is None:
            print(f"no broker running from {broker.data_dir}")
        broker.stop()
        return 0
    if pid is not None:
        print(f"kafka broker already running (pid {pid}) from {broker.data_dir}")
        return 0
    fetch()
    started = time.monotonic()
    broker.start(timeout_s=arguments.timeout)
    print(
        f"kafka {broker.version} running at {broker.bootstrap_servers} (pid {broker.running_pid()}, "
        f"started in {time.monotonic() - started:.1f} s); log: {broker.server_log_path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
