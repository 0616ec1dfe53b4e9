"""The service runtime's supervisor (`service_runtime.SupervisedWorker`): a crashed worker is
restarted, a worker stuck without progress is replaced, a stop reaches the running one."""

from __future__ import annotations

import threading
import time
from typing import ClassVar

import pytest
from mahjong_platform import service_runtime
from mahjong_platform.service_runtime import SupervisedWorker


class FakeWorker:
    """The first instance gets stuck (no progress, ignores nothing but its stop); later ones run
    normally, reporting progress, until stopped."""

    created: ClassVar[list[FakeWorker]] = []

    def __init__(self) -> None:
        self.stuck = not FakeWorker.created
        self.started = time.monotonic()
        self.closed = False
        self.stopped_by_event = False
        FakeWorker.created.append(self)

    def run_forever(self, stop_event: threading.Event) -> None:
        stop_event.wait()  # both kinds return only when told to stop
        self.stopped_by_event = True

    def stalled_seconds(self) -> float:
        return time.monotonic() - self.started if self.stuck else 0.0

    def close(self) -> None:
        self.closed = True


def wait_until(condition: object, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)


def test_a_stuck_worker_is_replaced_and_every_instance_stops_with_the_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(service_runtime, "WORKER_STALL_SECONDS", 0.2)
    monkeypatch.setattr(service_runtime, "WORKER_WATCH_INTERVAL_SECONDS", 0.02)
    FakeWorker.created = []
    stop = threading.Event()
    supervised = SupervisedWorker("fake", FakeWorker, stop)
    supervised.start()
    wait_until(lambda: len(FakeWorker.created) == 2)
    stuck, fresh = FakeWorker.created
    # The stuck one was told to stop (it did, and closed), and exactly one fresh one runs.
    wait_until(lambda: stuck.closed)
    assert stuck.stopped_by_event and stuck.closed
    time.sleep(0.3)
    assert len(FakeWorker.created) == 2 and not fresh.closed
    stop.set()
    supervised.join(60)
    assert fresh.stopped_by_event and fresh.closed


def test_a_crashed_worker_is_restarted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service_runtime, "WORKER_RESTART_PAUSE_SECONDS", 0.01)
    monkeypatch.setattr(service_runtime, "WORKER_WATCH_INTERVAL_SECONDS", 0.02)
    runs: list[int] = []

    class Crashing:
        def run_forever(self, stop_event: threading.Event) -> None:
            runs.append(1)
            if len(runs) < 3:
                raise RuntimeError("boom")
            stop_event.wait()

        def close(self) -> None:
            pass

    stop = threading.Event()
    supervised = SupervisedWorker("crashing", Crashing, stop)
    supervised.start()
    wait_until(lambda: len(runs) == 3)
    assert len(runs) == 3
    stop.set()
    supervised.join(60)
