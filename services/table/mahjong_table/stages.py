"""Where a command's time goes inside the table process (bench and debugging only).

With ``MAHJONG_TABLE_STAGE_TIMES=1`` in its environment the table process stamps each Play
command (``time.perf_counter``, the system-wide monotonic clock on Linux) as it passes its stages
and logs, every SUMMARY_SECONDS and when it stops, the p50/p90/p99 of each stage's duration over
the commands since the start:

    read       the Play stream's reader got the request (grpc.aio handed it to Python)
    task       its command task started running on the event loop
    queued     the group committer queued it (after any wait for a hidden claim window)
    taken      the writer thread took it into a batch
    begun      the batch's transaction began (the writer lock and BEGIN IMMEDIATE)
    decided    every command of the batch decided, in memory
    written    the batch's rows written (events, outbox, status, answers), not committed yet
    committed  COMMIT returned
    published  cache, tail, watchers told; the batch's futures resolved
    resolved   the caller's event loop ran the batch's hand-off
    answered   the command task had its answer (`_PlayStream.answered`)
    composed   the answer was put into a response to send (alone or riding on an update)

Off (the default) nothing is stamped: `timeline()` returns None and every hook is one test.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Sequence

logger = logging.getLogger(__name__)

ENABLED = os.environ.get("MAHJONG_TABLE_STAGE_TIMES", "") not in ("", "0")
STAGES = (
    "read",
    "task",
    "queued",
    "taken",
    "begun",
    "decided",
    "written",
    "committed",
    "published",
    "resolved",
    "answered",
    "composed",
)
(READ, TASK, QUEUED, TAKEN, BEGUN, DECIDED, WRITTEN, COMMITTED, PUBLISHED, RESOLVED, ANSWERED, COMPOSED) = (
    range(len(STAGES))
)
SUMMARY_SECONDS = 20.0
SAMPLES_MAX = 200_000

Timeline = list[float]
"""One command's stamps, by stage index (0.0: not reached)."""


def timeline() -> Timeline | None:
    """A new command's timeline, stamped `read` now; None when stage times are off."""
    if not ENABLED:
        return None
    stamps = [0.0] * len(STAGES)
    stamps[READ] = time.perf_counter()
    return stamps


def stamp(stamps: Timeline | None, stage: int) -> None:
    if stamps is not None:
        stamps[stage] = time.perf_counter()


def stamp_all(timelines: Sequence[Timeline | None], stage: int) -> None:
    """Stamp every command of a batch with one reading of the clock."""
    if ENABLED:
        now = time.perf_counter()
        for stamps in timelines:
            if stamps is not None:
                stamps[stage] = now


class _Recorder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: list[Timeline] = []
        self._last_summary = time.monotonic()

    def finished(self, stamps: Timeline | None) -> None:
        """`stamps` reached its last stage (or stops here): keep it, log a summary now and then."""
        if stamps is None:
            return
        with self._lock:
            if len(self._done) < SAMPLES_MAX:
                self._done.append(stamps)
            due = time.monotonic() - self._last_summary >= SUMMARY_SECONDS
            if due:
                self._last_summary = time.monotonic()
        if due:
            self.log_summary()

    def log_summary(self) -> None:
        with self._lock:
            done = list(self._done)
        if done:
            logger.info("stage times of %d Play commands:\n%s", len(done), summary(done))


def summary(timelines: Sequence[Timeline]) -> str:
    """One line per stage: p50/p90/p99 ms from the previous stage reached, and from `read`."""
    lines = [f"{'stage':<10} {'n':>7} {'p50':>7} {'p90':>7} {'p99':>7}   {'total p50':>9} {'p99':>7}"]
    for stage in range(1, len(STAGES)):
        steps: list[float] = []
        totals: list[float] = []
        for stamps in timelines:
            if not stamps[stage]:
                continue
            previous = max((index for index in range(stage) if stamps[index]), default=READ)
            steps.append(stamps[stage] - stamps[previous])
            totals.append(stamps[stage] - stamps[READ])
        if steps:
            steps.sort()
            totals.sort()
            lines.append(
                f"{STAGES[stage]:<10} {len(steps):>7} {_ms(steps, 0.5):>7} {_ms(steps, 0.9):>7} "
                f"{_ms(steps, 0.99):>7}   {_ms(totals, 0.5):>9} {_ms(totals, 0.99):>7}"
            )
    return "\n".join(lines)


def _ms(ordered: Sequence[float], quantile: float) -> str:
    return f"{1000 * ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]:.2f}"


RECORDER = _Recorder()
if ENABLED:
    atexit.register(RECORDER.log_summary)
