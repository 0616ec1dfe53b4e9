"""A throwaway PostgreSQL cluster on loopback for tests and local runs, without docker.

`PostgresCluster` runs `initdb` into a temporary folder, starts the server with `pg_ctl` on
127.0.0.1 and a free port (its unix socket stays inside the folder), creates databases on request
and hands out SQLAlchemy URLs. `stop()` shuts the server down and deletes the folder.

PostgreSQL refuses to run as root, and CI runs as root: then the server runs as an unprivileged
system user (`mahjongpg`, created with `useradd --system` when missing; `nobody` as a fallback),
which owns the temporary folder.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

DEFAULT_HOST = "127.0.0.1"
SUPERUSER = "mahjong"
SERVICE_USER = "mahjongpg"
FALLBACK_USER = "nobody"
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30
START_ATTEMPTS = 3  # a free port can be taken between picking it and binding it
MAX_DATABASE_NAME_LENGTH = 63  # NAMEDATALEN - 1
INSTALL_HINT = "PostgreSQL server binaries (Debian: apt-get install -y postgresql)"


class PostgresInfraError(RuntimeError):
    """The throwaway cluster could not be created, started or stopped; the message says why."""


# --- binaries -----------------------------------------------------------------------------------


def _has_server(bindir: Path) -> bool:
    return (bindir / "initdb").exists() and (bindir / "pg_ctl").exists() and (bindir / "postgres").exists()


def _major_of(bindir: Path) -> float:
    match = re.search(r"/postgresql/(\d+(?:\.\d+)?)/", str(bindir) + "/")
    return float(match.group(1)) if match else 0.0


@functools.cache
def find_bindir() -> Path:
    """The folder with initdb / pg_ctl / postgres: `pg_config --bindir`, else the newest Debian one.

    $MAHJONG_PG_BINDIR overrides both. On Debian `pg_config` may come from libpq-dev only, so its
    answer is used only when the server binaries are really there.
    """
    configured = os.environ.get("MAHJONG_PG_BINDIR")
    if configured:
        if not _has_server(Path(configured)):
            raise PostgresInfraError(f"MAHJONG_PG_BINDIR={configured} has no initdb/pg_ctl/postgres")
        return Path(configured)
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        completed = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        if completed.returncode == 0:
            candidates.append(Path(completed.stdout.strip()))
    candidates.extend(
        sorted((Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin")), key=_major_of, reverse=True)
    )
    on_path = shutil.which("initdb")
    if on_path is not None:
        candidates.append(Path(on_path).parent)
    for bindir in candidates:
        if _has_server(bindir):
            return bindir
    raise PostgresInfraError(f"no PostgreSQL server (initdb, pg_ctl, postgres) found: install {INSTALL_HINT}")


@functools.cache
def version() -> str:
    """The server version, e.g. "15.14", from `postgres --version`."""
    completed = subprocess.run(
        [str(find_bindir() / "postgres"), "--version"], capture_output=True, text=True, check=False
    )
    match = re.search(r"\(PostgreSQL\)\s+(\S+)", completed.stdout)
    if completed.returncode != 0 or match is None:
        raise PostgresInfraError(f"cannot read the PostgreSQL version: {completed.stdout}{completed.stderr}")
    return match.group(1)


# --- the unprivileged user when we are root ------------------------------------------------------


@dataclass(frozen=True)
class RunAs:
    """Who the server processes run as: None fields mean "the current user"."""

    user: str | None
    uid: int | None
    gid: int | None

    def subprocess_options(self) -> dict[str, Any]:
        if self.uid is None:
            return {}
        # Popen switches user after fork and before exec; extra_groups=[] drops root's groups.
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def _ensure_service_user() -> pwd.struct_passwd:
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(SERVICE_USER)
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    completed = subprocess.run(
        [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVICE_USER],
        capture_output=True,
        text=True,
        check=False,
    )
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(SERVICE_USER)  # created now, or by a concurrent session
    try:
        return pwd.getpwnam(FALLBACK_USER)
    except KeyError as error:
        raise PostgresInfraError(
            f"running as root, and neither user {SERVICE_USER!r} could be created "
            f"({completed.stderr.strip()}) nor {FALLBACK_USER!r} exists"
        ) from error


def run_as() -> RunAs:
    """The current user, or the unprivileged service user when we are root (PostgreSQL refuses root)."""
    if os.geteuid() != 0:
        return RunAs(user=None, uid=None, gid=None)
    entry = _ensure_service_user()
    return RunAs(user=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def database_name(hint: str) -> str:
    """A valid, unquoted PostgreSQL database name from any hint (lowercase, [a-z0-9_], <= 63 chars)."""
    cleaned = re.sub(r"[^a-z0-9_]+", "_", hint.lower()).strip("_") or "db"
    if not cleaned[0].isalpha():
        cleaned = "db_" + cleaned
    return cleaned[:MAX_DATABASE_NAME_LENGTH]


# --- the cluster --------------------------------------------------------------------------------

_SETTING_NAME = re.compile(r"[a-z_][a-z0-9_.]*")
_SETTING_VALUE = re.compile(r"[A-Za-z0-9_.:/-]+")


def _check_settings(settings: Mapping[str, str]) -> None:
    """Server settings must fit pg_ctl's one ``--options`` string as they are (no spaces or
    quotes to escape); anything else is a `ValueError`."""
    for name, value in settings.items():
        if not _SETTING_NAME.fullmatch(name) or not _SETTING_VALUE.fullmatch(value):
            raise ValueError(f"unsupported server setting {name!r}={value!r}")


@dataclass
class PostgresCluster:
    """A disposable PostgreSQL cluster: `start()`, `create_database()`, `url()`, `stop()`.

    Authentication is `trust` for loopback only: the server listens on 127.0.0.1 and a socket
    folder only its user can enter, and it is deleted with the cluster.

    `server_settings`: more server parameters (name -> value, e.g. ``{"autovacuum_naptime":
    "1s"}``), set at start after the cluster's own (fsync off and the rest below).
    """

    host: str = DEFAULT_HOST
    port: int | None = None
    base_dir: Path | None = None
    superuser: str = SUPERUSER
    keep_files: bool = False
    server_settings: Mapping[str, str] = field(default_factory=dict)
    _root: Path | None = field(default=None, init=False, repr=False)
    _run_as: RunAs | None = field(default=None, init=False, repr=False)
    _created_root: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        _check_settings(self.server_settings)

    # paths ------------------------------------------------------------------------------------

    @property
    def root(self) -> Path:
        if self._root is None:
            raise PostgresInfraError("the cluster has not been started")
        return self._root

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "socket"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    @property
    def version(self) -> str:
        return version()

    # lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """initdb a new cluster and start the server; returns once it accepts connections."""
        bindir = find_bindir()
        self._run_as = run_as()
        if self.base_dir is not None:
            self.base_dir.mkdir(parents=True, exist_ok=True)
        self._root = Path(tempfile.mkdtemp(prefix="mahjong-pg-", dir=self.base_dir))
        self._created_root = True
        self.socket_dir.mkdir()
        if self._run_as.uid is not None:
            for path in (self._root, self.socket_dir):
                os.chown(path, self._run_as.uid, self._run_as.gid or 0)
        self._run(
            [
                str(bindir / "initdb"),
                "--pgdata",
                str(self.data_dir),
                "--username",
                self.superuser,
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--locale",
                "C",
                "--no-sync",  # a test cluster never needs to survive a power cut
            ],
            what="initdb",
        )
        chosen_port = self.port
        for attempt in range(1, START_ATTEMPTS + 1):
            port = chosen_port if chosen_port is not None else _free_port(self.host)
            try:
                self._pg_ctl_start(bindir, port)
                self.port = port
                return
            except PostgresInfraError:
                if chosen_port is not None or attempt == START_ATTEMPTS:
                    self.stop()
                    raise

    def _pg_ctl_start(self, bindir: Path, port: int) -> None:
        server_options = " ".join(
            [
                f"-c listen_addresses={self.host}",
                f"-c port={port}",
                f"-c unix_socket_directories={self.socket_dir}",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
                "-c max_connections=200",
                "-c shared_buffers=64MB",
                *(f"-c {name}={value}" for name, value in self.server_settings.items()),
            ]
        )
        self._run(
            [
                str(bindir / "pg_ctl"),
                "start",
                "--pgdata",
                str(self.data_dir),
                "--log",
                str(self.log_path),
                "--wait",
                "--timeout",
                str(START_TIMEOUT_S),
                "--options",
                server_options,
            ],
            what="pg_ctl start",
        )

    def stop(self) -> None:
        """Stop the server (fast shutdown, then immediate) and delete its files unless keep_files."""
        if self._root is None:
            return
        if (self.data_dir / "postmaster.pid").exists():
            self._stop_server()
        if self._created_root and not self.keep_files:
            shutil.rmtree(self._root, ignore_errors=True)
        self._root = None

    def _stop_server(self) -> None:
        pg_ctl = str(find_bindir() / "pg_ctl")
        for mode in ("fast", "immediate"):
            command = [pg_ctl, "stop", "--pgdata", str(self.data_dir), "--mode", mode, "--wait"]
            with contextlib.suppress(PostgresInfraError):
                self._run([*command, "--timeout", str(STOP_TIMEOUT_S)], what=f"pg_ctl stop ({mode})")
                return
        self._kill_postmaster()

    def _kill_postmaster(self) -> None:
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            pid = int((self.data_dir / "postmaster.pid").read_text(encoding="ascii").splitlines()[0])
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)

    def _run(self, command: list[str], *, what: str) -> None:
        assert self._run_as is not None
        completed = subprocess.run(
            command,
            capture_output=True,
            text=True,
            cwd=self.root,  # the server user must be able to enter its working directory
            timeout=START_TIMEOUT_S + 30,
            check=False,
            env={**os.environ, "LC_ALL": "C", "LANG": "C"},
            **self._run_as.subprocess_options(),
        )
        if completed.returncode != 0:
            log_tail = ""
            if self._root is not None and self.log_path.exists():
                lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-30:]
                log_tail = f"\n--- last lines of {self.log_path} ---\n" + "\n".join(lines)
            raise PostgresInfraError(
                f"{what} failed ({completed.returncode}):\n{completed.stdout}{completed.stderr}{log_tail}"
            )

    # databases --------------------------------------------------------------------------------

    def url(self, database: str = "postgres", *, driver: str = "psycopg") -> str:
        """A SQLAlchemy URL, e.g. `postgresql+psycopg://mahjong@127.0.0.1:54321/postgres`."""
        if self.port is None or self._root is None:
            raise PostgresInfraError("the cluster has not been started")
        return f"postgresql+{driver}://{self.superuser}@{self.host}:{self.port}/{database}"

    def _admin_execute(self, statement: str) -> None:
        import psycopg  # only needed once a cluster runs

        assert self.port is not None
        with psycopg.connect(
            host=self.host, port=self.port, user=self.superuser, dbname="postgres", autocommit=True
        ) as connection:
            connection.execute(statement.encode("utf-8"))

    def create_database(self, name: str) -> str:
        """Create a database (the name is sanitised by `database_name`) and return its URL."""
        database = database_name(name)
        self._admin_execute(f'CREATE DATABASE "{database}"')
        return self.url(database)

    def drop_database(self, name: str) -> None:
        database = database_name(name)
        self._admin_execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')

    def __enter__(self) -> PostgresCluster:
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


def main(argv: list[str] | None = None) -> int:
    """`python -m mahjong_infra.postgres version|run`: run = start a cluster, print its URL, wait."""
    parser = argparse.ArgumentParser(prog="python -m mahjong_infra.postgres")
    parser.add_argument("command", choices=["version", "run"])
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--database", default="mahjong")
    arguments = parser.parse_args(argv)
    try:
        if arguments.command == "version":
            print(f"postgresql {version()} ({find_bindir()})")
            return 0
        with PostgresCluster(port=arguments.port) as cluster:
            print(f"postgresql {cluster.version}: {cluster.create_database(arguments.database)}", flush=True)
            print("Ctrl-C stops the cluster and deletes its files.", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
    except PostgresInfraError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
