"""``make run``'s supervisor (``config/run.py``): a child that dies is started again (a
killed worker does not take the site down with it), and one that keeps dying stops
everything instead of restarting forever. The children are real processes, killed with
SIGKILL."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading

import psutil

from config.run import MAX_RESTARTS, Server, Supervisor
from tests.programs import wait_for

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
CRASHER = [sys.executable, "-c", "raise SystemExit(3)"]


def test_a_killed_child_is_started_again_and_the_others_keep_running():
    supervisor = Supervisor()
    supervisor.spawn("worker", SLEEPER, dict(os.environ), None)
    supervisor.spawn("web", SLEEPER, dict(os.environ), None)
    web, worker = supervisor.children["web"].pid, supervisor.children["worker"].pid
    outcome: list[int] = []
    waiting = threading.Thread(target=lambda: outcome.append(supervisor.wait()))
    waiting.start()
    try:
        os.kill(worker, signal.SIGKILL)
        wait_for(
            lambda: supervisor.children["worker"].pid != worker,
            timeout=10,
            what="the worker started again",
        )
        assert supervisor.children["worker"].poll() is None
        assert supervisor.children["web"].pid == web  # untouched
        assert supervisor.children["web"].poll() is None
    finally:
        supervisor.stopping = True
        waiting.join(timeout=10)
        supervisor.stop()
    assert outcome == [0]
    assert all(child.poll() is not None for child in supervisor.children.values())


def test_a_child_that_keeps_dying_stops_everything_with_its_status():
    supervisor = Supervisor()
    supervisor.spawn("web", SLEEPER, dict(os.environ), None)
    supervisor.spawn("worker", CRASHER, dict(os.environ), None)
    try:
        status = supervisor.wait()
    finally:
        supervisor.stop()
    assert status == 3
    assert len(supervisor.restarts["worker"]) == MAX_RESTARTS
    assert supervisor.children["web"].poll() is not None  # stopped with it


def test_a_watched_server_that_stops_is_started_again(tmp_path):
    """The embedded PostgreSQL and Redis are not the supervisor's children (they
    daemonize): it looks whether each runs, and starts it again."""
    pidfile = tmp_path / "server.pid"
    started: list[int] = []

    def start() -> None:
        server = subprocess.Popen(SLEEPER, start_new_session=True)
        pidfile.write_text(str(server.pid))
        started.append(server.pid)

    def running() -> bool:
        return psutil.pid_exists(int(pidfile.read_text())) and (
            psutil.Process(int(pidfile.read_text())).status() != psutil.STATUS_ZOMBIE
        )

    start()
    supervisor = Supervisor()
    supervisor.watch("PostgreSQL", Server(running=running, start=start))
    supervisor.spawn("web", SLEEPER, dict(os.environ), None)
    outcome: list[int] = []
    waiting = threading.Thread(target=lambda: outcome.append(supervisor.wait()))
    waiting.start()
    try:
        os.kill(started[0], signal.SIGKILL)
        wait_for(lambda: len(started) == 2, timeout=10, what="the server started again")
        assert running()
    finally:
        supervisor.stopping = True
        waiting.join(timeout=10)
        supervisor.stop()
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert outcome == [0]
    assert supervisor.restarts["PostgreSQL"]
