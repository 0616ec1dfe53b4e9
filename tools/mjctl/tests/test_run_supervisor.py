"""``mjctl run`` supervises its service processes: a killed one is started again (and said so), a
crashing one backs off, and ``stop`` ends them all for good."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from mjctl import run
from mjctl.run import ServiceProcesses, describe_exit

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
CRASHER = [sys.executable, "-c", "raise SystemExit(3)"]


def wait_until(condition: Callable[[], object], seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)


class Echo:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)


def is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_killed_service_process_is_restarted_and_the_restart_is_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run, "RESTART_FIRST_PAUSE_SECONDS", 0.05)
    echo = Echo()
    processes = ServiceProcesses(["table", "ledger"], tmp_path, echo=echo, command=lambda _name: SLEEPER)
    processes.start()
    try:
        first = processes.pid("table")
        ledger = processes.pid("ledger")
        assert first is not None and ledger is not None
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: processes.pid("table") not in (None, first))
        assert processes.pid("table") not in (None, first)
        assert processes.pid("ledger") == ledger  # the others are left alone
        assert processes.restarts == {"table": 1}
        assert any(f"table (pid {first}) was killed by SIGKILL" in line for line in echo.lines)
        assert "supervisor: table restarted (restart 1)" in echo.lines
        survivors = [processes.pid("table"), processes.pid("ledger")]
    finally:
        processes.stop()
    assert not any(is_running(pid) for pid in survivors if pid is not None)
    assert processes.restarts == {"table": 1}  # nothing is restarted after stop


def test_a_service_that_keeps_crashing_keeps_being_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run, "RESTART_FIRST_PAUSE_SECONDS", 0.01)
    echo = Echo()
    processes = ServiceProcesses(["scoring"], tmp_path, echo=echo, command=lambda _name: CRASHER)
    processes.start()
    try:
        wait_until(lambda: processes.restarts["scoring"] >= 3)
    finally:
        processes.stop()
    assert processes.restarts["scoring"] >= 3
    assert "supervisor: scoring restarted (restart 3)" in echo.lines
    assert "exited with status 3; restarting in" in echo.lines[0]


def test_the_restart_pause_doubles_up_to_its_cap_and_resets_after_a_stable_run(tmp_path: Path) -> None:
    processes = ServiceProcesses(["table"], tmp_path, command=lambda _name: SLEEPER)
    now = time.monotonic()
    processes._started_at["table"] = now  # died at once, again and again
    pauses = [processes._next_pause("table") for _ in range(9)]
    assert pauses == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    processes._started_at["table"] = now - run.STABLE_AFTER_SECONDS  # up a minute, then died
    assert processes._next_pause("table") == 0.5


def test_exit_statuses_are_described_in_words() -> None:
    assert describe_exit(-9) == "was killed by SIGKILL"
    assert describe_exit(1) == "exited with status 1"


WRITE_PAST_THE_LIMIT = (
    "import sys\n"
    "print('started', flush=True)\n"
    "try:\n"
    "    with open(sys.argv[1], 'wb') as file:\n"
    "        file.write(b'x' * int(sys.argv[2]))\n"
    "except OSError as error:\n"
    "    print('write failed:', error, flush=True)\n"
)


def test_a_start_on_the_full_disk_forks_nothing_python_and_its_writes_past_the_limit_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mjctl chaos`'s full disk: the service starts with the file size limit and logs to its own
    file, and the supervisor starts it without a `preexec_fn` (which makes `subprocess` fork the
    supervisor, whose other threads are in gRPC: gRPC's fork handlers then crashed the child
    before its exec now and then, "Fatal Python error: Aborted" or a segfault, so the fault was
    not injected; seen in `make test`'s test_chaos)."""
    from mjctl.chaos import FULL_DISK_FILE_BYTES, FullDisk

    started: list[dict[str, object]] = []
    real_popen = run.subprocess.Popen

    def recording_popen(*arguments: object, **options: object) -> object:
        started.append(options)
        return real_popen(*arguments, **options)  # type: ignore[call-overload]

    monkeypatch.setattr(run.subprocess, "Popen", recording_popen)
    full_disk = FullDisk(tmp_path)
    full_disk.limit_next_start("scoring")
    target = tmp_path / "big.bin"
    command = [sys.executable, "-c", WRITE_PAST_THE_LIMIT, str(target), str(2 * FULL_DISK_FILE_BYTES)]
    processes = ServiceProcesses(
        ["scoring"], tmp_path, echo=Echo(), prepare=full_disk.prepare, command=lambda _name: command
    )
    processes.start()
    try:
        log = full_disk.log_path("scoring")
        wait_until(lambda: log.exists() and "write failed" in log.read_text())
        assert "write failed: [Errno 27] File too large" in log.read_text()
        assert target.stat().st_size == FULL_DISK_FILE_BYTES
        assert full_disk.errors_seen() == 1
    finally:
        processes.stop()
    preexec_fns = [options.get("preexec_fn") for options in started]
    assert preexec_fns and all(preexec_fn is None for preexec_fn in preexec_fns), preexec_fns
