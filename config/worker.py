"""``make worker``: a Celery worker that joins a site.

With ``CELERY_BROKER_URL`` set, it works on that broker, with beat (the sweeper) inside.
Without, it joins the site ``make run`` serves from the same data directory, on its
embedded Redis (broker and shared cache; that site's own worker runs beat), or, when
that Redis is not running, refuses in one line: a worker on no broker would never
receive the site's tasks.

``python -m config.worker [celery worker options]``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping


class NoBroker(Exception):
    """Nothing to join: no ``CELERY_BROKER_URL`` and no embedded Redis running."""


def worker_command(environ: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The ``celery worker`` command line and environment for ``environ``: a node name of
    its own (two workers of one name would share a heartbeat, and what each holds)."""
    command = [sys.executable, "-m", "celery", "-A", "config", "worker", "--loglevel=info"]
    command += ["-n", f"worker-{os.getpid()}@%h"]
    env = dict(environ)
    if env.get("CELERY_BROKER_URL"):
        return [*command, "--beat"], env
    from config.embedded_redis import default

    redis = default()
    if redis.pid() is None:
        raise NoBroker(
            "no broker to join: start the site with make run (its embedded Redis, in"
            f" {redis.directory}), or set CELERY_BROKER_URL"
        )
    from config.run import demo_embedder

    env.update(CELERY_BROKER_URL=redis.broker_url, REDIS_URL=redis.url)
    # The embedder make run chose for its site: records embedded alike.
    env["MEMORYHUB_EMBEDDER"] = demo_embedder(env)
    env.setdefault("DEBUG", "1")
    return command, env


def main(argv: list[str]) -> int:
    try:
        command, env = worker_command(os.environ)
    except NoBroker as exc:
        print(f"make worker: {exc}", file=sys.stderr)
        return 2
    os.execve(sys.executable, [*command, *argv], env)
    return 0  # pragma: no cover - execve does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
