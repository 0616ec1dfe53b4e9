"""`make bench-system` prints the pids of the bot processes of each run (`mjctl bots`' children
running `multiprocessing.spawn`), so a profiler can be attached to them while they play."""

from __future__ import annotations

import subprocess
import sys

from mjctl import bench_system

PARENT = """
import multiprocessing, sys, time
if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=time.sleep, args=(30,), daemon=True) for _ in range(2)]
    for worker in workers:
        worker.start()
    print(" ".join(str(worker.pid) for worker in workers), flush=True)
    time.sleep(30)
"""


def test_the_pids_of_the_spawned_bot_processes_are_found() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        started = sorted(int(pid) for pid in parent.stdout.readline().split())
        assert bench_system._worker_pids(parent, 2) == started
        line = bench_system._pids_line({"table": 11, "kafka broker": 12}, parent.pid, started)
        workers = f"{started[0]}, {started[1]}"
        assert line == f"pids: table 11, kafka broker 12; bots {parent.pid} (bot processes {workers})"
    finally:
        parent.kill()
        parent.wait()


def test_no_bot_processes_once_the_bots_have_ended() -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    assert bench_system._worker_pids(ended, 2) == []
    assert bench_system._pids_line({}, ended.pid, []).endswith("(bot processes not found)")
