"""The load test: many concurrent API clients of many tenants, every answer checked.

32 client threads (plain threads, one keep-alive ``httpx.Client`` each) drive a real
gunicorn for a bounded time, mixing 80% queries, 15% writes and 5% forgets across 10
tenants (10 orgs, one API key each). Writes go through a real Celery worker on a private
Redis (or run eagerly in gunicorn when ``redis-server`` is missing: the report says which);
the query cache is that Redis too, shared by the gunicorn workers.

Every tenant's content carries a unique marker token (in the text and the metadata), and
every query answer is checked:

* zero 5xx (and zero transport errors);
* zero items of another tenant (an item without the tenant's marker);
* zero items of a namespace whose forget had returned before the query was sent (a
  namespace is closed to new writes, and waits for its writes in flight, before it is
  forgotten, so nothing can legitimately re-create it);
* zero items outside the namespaces the query asked for.

``run_load(...)`` drives an already running server and returns a JSON-able dict;
``measure(...)`` sets everything up (tenants, Redis, worker, gunicorn) around it;
``python -m benchmarks.load [--seconds 60] [--clients 32]`` runs it on a database of its
own and prints the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TENANTS = 10
CLIENTS = 32
SECONDS = 60.0
MIX = (("query", 0.80), ("write", 0.15), ("forget", 0.05))
DOMAIN = "support"
#: Shared by every tenant, so a leak across tenants would be found by the search.
VOCABULARY = [
    "refund",
    "invoice",
    "shipping",
    "delivery",
    "payment",
    "receipt",
    "account",
    "password",
    "order",
    "customer",
    "warranty",
    "return",
    "exchange",
    "discount",
    "coupon",
    "subscription",
    "billing",
    "address",
    "parcel",
    "tracking",
    "support",
    "agent",
    "ticket",
    "escalation",
    "policy",
    "deadline",
    "currency",
    "preference",
    "language",
]
#: What the clients ask (a few, so that answers come from the cache too).
QUESTIONS = [" ".join(VOCABULARY[n : n + 3]) for n in range(0, 24, 3)]
#: How many violations are kept as examples in the report.
EXAMPLES = 10


# --- servers -------------------------------------------------------------------------------


def start_gunicorn(
    logs: Path,
    *,
    memoryhub: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    workers: int = 2,
    threads: int = 4,
) -> tuple[subprocess.Popen[bytes], str]:
    """gunicorn serving the site on a free port, on this process's database.

    ``memoryhub`` overrides ``MEMORYHUB`` settings (through ``tests.worker_settings``);
    ``env`` adds environment (``CELERY_BROKER_URL``, ``REDIS_URL``).
    """
    import httpx

    from tests.programs import database_url, free_port, wait_for

    port = free_port()
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
        "MEMORYHUB_TEST_SETTINGS": json.dumps(memoryhub or {}),
        "DATABASE_URL": database_url(),
        "DEBUG": "0",
        "SECRET_KEY": "load-" + uuid.uuid4().hex,
        "ALLOWED_HOSTS": "127.0.0.1",
        # Plain HTTP on the loopback: no TLS terminator in front to redirect to.
        "SECURE_SSL_REDIRECT": "0",
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("CELERY_BROKER_URL", "REDIS_URL"):
        environment.pop(name, None)
    environment.update(env or {})
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"gunicorn-{port}.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "config.wsgi:application"]
        + ["--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--threads", str(threads)]
        + ["--log-level", "warning", "--graceful-timeout", "5"],
        cwd=ROOT,
        env=environment,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )

    def up() -> bool:
        if process.poll() is not None:
            raise AssertionError("gunicorn exited:\n" + log.read_text(errors="replace")[-3000:])
        try:
            return httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=2).status_code < 600
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, timeout=90, what="gunicorn to answer")
    except BaseException:
        process.terminate()
        process.wait(timeout=20)
        raise
    return process, f"http://127.0.0.1:{port}"


def stop(process: subprocess.Popen[bytes]) -> None:
    from tests.programs import stop_process

    stop_process(process, timeout=30)


# --- tenants ---------------------------------------------------------------------------------


@dataclass
class Tenant:
    """One org: its API key, its marker, and the state of its namespaces."""

    index: int
    key: str
    marker: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    open: list[str] = field(default_factory=list)
    in_flight: Counter[str] = field(default_factory=Counter)
    written: Counter[str] = field(default_factory=Counter)
    #: namespace -> ``time.monotonic()`` when its forget returned
    forgotten: dict[str, float] = field(default_factory=dict)
    created: int = 0

    def new_namespace(self) -> str:
        self.created += 1
        name = f"user:{self.index}-{self.created}"
        self.open.append(name)
        return name

    def begin_write(self, rng: random.Random) -> str:
        """A namespace to write to ("" a third of the time); it cannot be forgotten now."""
        with self.lock:
            if rng.random() < 0.3:
                namespace = ""
            elif len(self.open) < 4 or rng.random() < 0.1:
                namespace = self.new_namespace()
            else:
                namespace = rng.choice(self.open)
            self.in_flight[namespace] += 1
            return namespace

    def end_write(self, namespace: str, accepted: int) -> None:
        with self.lock:
            self.in_flight[namespace] -= 1
            self.written[namespace] += accepted

    def begin_forget(self, rng: random.Random) -> str | None:
        """Close a namespace with no writes in flight: no write to it starts again."""
        with self.lock:
            idle = [name for name in self.open if not self.in_flight[name]]
            if not idle:
                return None
            written = [name for name in idle if self.written[name]]
            namespace = rng.choice(written or idle)
            self.open.remove(namespace)
            return namespace

    def end_forget(self, namespace: str) -> None:
        with self.lock:
            self.forgotten[namespace] = time.monotonic()

    def query_namespaces(self, rng: random.Random) -> list[str]:
        """The shared namespace, one recent namespace (open or forgotten), or both.

        Few combinations, so queries repeat and the query cache is exercised: a cached
        answer that outlived a forget would show up as a forgotten item.
        """
        with self.lock:
            recent = [*self.open[-4:], *list(self.forgotten)[-4:]]
        draw = rng.random()
        if not recent or draw < 0.3:
            return [""]
        return ["", rng.choice(recent)] if draw < 0.6 else [rng.choice(recent)]

    def forgotten_before(self, moment: float) -> set[str]:
        with self.lock:
            return {name for name, at in self.forgotten.items() if at < moment}


def content_for(tenant: Tenant, rng: random.Random) -> str:
    words = " ".join(rng.sample(VOCABULARY, 6))
    return f"{tenant.marker} {words} {uuid.uuid4().hex[:8]}"


def create_tenants(count: int = TENANTS, *, records: int = 100, run: str = "") -> list[Tenant]:
    """``count`` orgs with a domain, a read/write/forget key and ``records`` marked records.

    Runs in this process, through the write service (indexed eagerly when no broker is
    configured here).
    """
    from memoryhub import policy
    from memoryhub.scope import Scope
    from memoryhub.services import write
    from tenants.models import ApiKey, Domain, Org

    run = run or uuid.uuid4().hex[:6]
    rng = random.Random(run)
    tenants = []
    for index in range(count):
        org = Org.objects.create(slug=f"load-{run}-{index}", name=f"Load {index}")
        domain = Domain.objects.create(org=org, slug=DOMAIN)
        _, key = ApiKey.objects.create_key(
            name="load", org=org, can_read=True, can_write=True, can_forget=True
        )
        tenant = Tenant(index=index, key=key, marker=f"tenantmark{run}t{index}z")
        for start in range(0, records, 100):
            batch = []
            for _ in range(min(100, records - start)):
                namespace = tenant.begin_write(rng)
                tenant.end_write(namespace, 1)
                batch.append(
                    {
                        "content": content_for(tenant, rng),
                        "namespace": namespace,
                        "metadata": {"tenant": tenant.marker},
                    }
                )
            write.write(
                Scope.for_domain(domain), batch, principal=policy.AgentPrincipal(label="load-seed")
            )
        tenants.append(tenant)
    return tenants


# --- the driver ------------------------------------------------------------------------------


@dataclass
class Tally:
    """What one client saw; merged at the end."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    statuses: dict[str, Counter[int]] = field(default_factory=dict)
    transport_errors: Counter[str] = field(default_factory=Counter)
    items_checked: int = 0
    cross_tenant: int = 0
    forgotten: int = 0
    outside_namespaces: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)

    def note(self, operation: str, seconds: float, status: int) -> None:
        self.latencies.setdefault(operation, []).append(seconds)
        self.statuses.setdefault(operation, Counter())[status] += 1

    def violation(self, kind: str, **detail: Any) -> None:
        if len(self.examples) < EXAMPLES:
            self.examples.append({"kind": kind, **detail})


def check_items(
    tally: Tally, tenant: Tenant, others: list[str], body: Any, asked: list[str], sent: float
) -> None:
    forgotten = tenant.forgotten_before(sent)
    for item in body.get("items", []) if isinstance(body, dict) else []:
        tally.items_checked += 1
        content = str(item.get("content", ""))
        metadata = item.get("metadata") or {}
        text = content + json.dumps(metadata)
        if (
            tenant.marker not in content
            or metadata.get("tenant") != tenant.marker
            or any(marker in text for marker in others)
        ):
            tally.cross_tenant += 1
            tally.violation("cross_tenant", tenant=tenant.index, content=content[:120])
        namespace = item.get("namespace")
        if namespace in forgotten:
            tally.forgotten += 1
            tally.violation("forgotten", tenant=tenant.index, namespace=namespace)
        if namespace not in asked:
            tally.outside_namespaces += 1
            tally.violation("outside_namespaces", namespace=namespace, asked=asked)


def client_loop(
    base_url: str, tenant: Tenant, others: list[str], deadline: float, seed: int
) -> Tally:
    import httpx

    rng = random.Random(seed)
    tally = Tally()
    operations = [name for name, _ in MIX]
    weights = [weight for _, weight in MIX]
    path = f"/api/v1/domains/{DOMAIN}"
    with httpx.Client(
        base_url=base_url, timeout=60, headers={"Authorization": f"Api-Key {tenant.key}"}
    ) as client:
        while time.monotonic() < deadline:
            operation = rng.choices(operations, weights)[0]
            namespace: str | None = None
            body: dict[str, Any]
            if operation == "query":
                asked = tenant.query_namespaces(rng)
                body = {
                    "query": rng.choice(QUESTIONS),
                    "k": 10,
                    "namespaces": asked,
                    "mode": rng.choices(["hybrid", "keyword", "vector"], [6, 2, 2])[0],
                }
            elif operation == "write":
                namespace = tenant.begin_write(rng)
                body = {
                    "items": [
                        {
                            "content": content_for(tenant, rng),
                            "namespace": namespace,
                            "metadata": {"tenant": tenant.marker},
                        }
                        for _ in range(rng.randint(1, 5))
                    ]
                }
            else:
                namespace = tenant.begin_forget(rng)
                if namespace is None:
                    continue
                body = {"namespace": namespace}
            sent = time.monotonic()
            try:
                response = client.post(
                    f"{path}/{'records' if operation == 'write' else operation}", json=body
                )
            except httpx.HTTPError as exc:
                tally.transport_errors[type(exc).__name__] += 1
                if operation == "write" and namespace is not None:
                    tenant.end_write(namespace, 0)
                continue
            elapsed = time.monotonic() - sent
            tally.note(operation, elapsed, response.status_code)
            if response.status_code >= 500:
                tally.violation(
                    "5xx",
                    operation=operation,
                    status=response.status_code,
                    body=response.text[:200],
                )
            if operation == "write" and namespace is not None:
                tenant.end_write(namespace, len(body["items"]) if response.is_success else 0)
            elif operation == "forget" and namespace is not None:
                if response.is_success:
                    tenant.end_forget(namespace)
            elif response.status_code == 200:
                check_items(tally, tenant, others, response.json(), body["namespaces"], sent)
    return tally


def percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0}
    ordered = sorted(samples)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)

    return {"p50": at(0.50), "p95": at(0.95), "p99": at(0.99)}


def run_load(
    base_url: str,
    tenants: list[Tenant],
    *,
    clients: int = CLIENTS,
    seconds: float = SECONDS,
    seed: int = 0,
) -> dict[str, Any]:
    """Drive ``base_url`` with ``clients`` threads for ``seconds``; return the figures."""
    from concurrent.futures import ThreadPoolExecutor

    markers = [tenant.marker for tenant in tenants]
    started = time.monotonic()
    deadline = started + seconds
    with ThreadPoolExecutor(clients) as pool:
        futures = [
            pool.submit(
                client_loop,
                base_url,
                tenants[n % len(tenants)],
                [m for m in markers if m != tenants[n % len(tenants)].marker],
                deadline,
                seed * 1000 + n,
            )
            for n in range(clients)
        ]
        tallies = [future.result() for future in futures]
    wall = time.monotonic() - started
    operations: dict[str, Any] = {}
    for name, _ in MIX:
        samples = [s for tally in tallies for s in tally.latencies.get(name, [])]
        statuses: Counter[int] = Counter()
        for tally in tallies:
            statuses.update(tally.statuses.get(name, Counter()))
        operations[name] = {
            "requests": len(samples),
            "qps": round(len(samples) / wall, 1),
            **percentiles(samples),
            "statuses": {str(code): n for code, n in sorted(statuses.items())},
            "errors": sum(n for code, n in statuses.items() if code >= 400),
        }
    total = sum(op["requests"] for op in operations.values())
    transport: Counter[str] = Counter()
    for tally in tallies:
        transport.update(tally.transport_errors)
    return {
        "clients": clients,
        "tenants": len(tenants),
        "seconds": round(wall, 2),
        "requests": total,
        "qps": round(total / wall, 1),
        "operations": operations,
        "errors_5xx": sum(
            n
            for op in operations.values()
            for code, n in op["statuses"].items()
            if int(code) >= 500
        ),
        "errors_4xx": sum(
            n
            for op in operations.values()
            for code, n in op["statuses"].items()
            if 400 <= int(code) < 500
        ),
        "transport_errors": dict(transport),
        "items_checked": sum(t.items_checked for t in tallies),
        "cross_tenant_items": sum(t.cross_tenant for t in tallies),
        "forgotten_items": sum(t.forgotten for t in tallies),
        "items_outside_namespaces": sum(t.outside_namespaces for t in tallies),
        "namespaces_forgotten": sum(len(t.forgotten) for t in tenants),
        "violations": [example for t in tallies for example in t.examples][:EXAMPLES],
    }


# --- the whole measurement -------------------------------------------------------------------


@contextmanager
def backend(logs: Path, *, shared_cache: bool = True) -> Iterator[dict[str, Any]]:
    """A private Redis and one Celery worker on it, if ``redis-server`` is installed.

    Yields the environment for gunicorn and a description; without Redis, tasks run
    eagerly inside gunicorn and the cache is each gunicorn worker's own memory.
    """
    from config.embedded_redis import executable
    from tests.programs import start_private_redis, start_worker

    logs.mkdir(parents=True, exist_ok=True)
    if executable() is None:
        yield {"env": {}, "indexing": "eager (in gunicorn)", "cache": "local memory"}
        return
    with ExitStack() as stack:
        redis = start_private_redis(logs)
        stack.callback(redis.stop)
        broker = redis.url(db=0)
        worker = start_worker(broker, logs / "load-worker.log", pool="prefork", concurrency=1)
        stack.callback(worker.stop)
        env = {"CELERY_BROKER_URL": broker}
        if shared_cache:
            env["REDIS_URL"] = redis.url(db=1)
        yield {
            "env": env,
            "indexing": "celery worker (prefork, concurrency 1) on a private redis-server",
            "cache": "redis (shared by the gunicorn workers)" if shared_cache else "local memory",
            "redis": redis,
        }


def measure(
    logs: Path,
    *,
    clients: int = CLIENTS,
    seconds: float = SECONDS,
    records: int = 100,
    shared_cache: bool = True,
) -> dict[str, Any]:
    """Tenants, Redis, a worker and gunicorn around :func:`run_load`, on Django's database."""
    from memoryhub.models import MemoryRecord

    started = time.monotonic()
    tenants = create_tenants(TENANTS, records=records)
    with backend(logs, shared_cache=shared_cache) as services:
        process, base_url = start_gunicorn(
            logs, memoryhub={"THROTTLE_RATE": None}, env=services["env"]
        )
        try:
            figures = run_load(base_url, tenants, clients=clients, seconds=seconds)
        finally:
            stop(process)
        redis = services.get("redis")
        if redis is not None:
            from tests.programs import wait_for

            def drained() -> bool:
                pending = MemoryRecord.unscoped.filter(status="pending").count()
                return pending == 0

            drain_started = time.monotonic()
            try:
                wait_for(drained, timeout=120, what="the worker to index the load's writes")
                figures["indexing_drained_seconds"] = round(time.monotonic() - drain_started, 2)
            except AssertionError:
                figures["indexing_drained_seconds"] = None
    statuses = Counter(MemoryRecord.unscoped.values_list("status", flat=True))
    figures["setup"] = {
        "gunicorn": "2 workers x 4 threads",
        "indexing": services["indexing"],
        "cache": services["cache"],
        "throttle": "off",
        "seed_records_per_tenant": records,
        "mix": dict(MIX),
        "records_by_status_after": dict(statuses),
        "total_seconds": round(time.monotonic() - started, 1),
    }
    return figures


def _setup_database(name: str) -> None:
    """A fresh database ``name`` on the embedded server (or ``LOAD_DATABASE_URL``), migrated."""
    url = os.environ.get("LOAD_DATABASE_URL")
    if not url:
        import psycopg
        from psycopg import sql

        from memoryhub.contrib.embedded_postgres import server as embedded

        data_dir = Path(os.environ.get("MEMORYHUB_DATA_DIR") or ROOT / ".memoryhub") / "postgres"
        socket_dir = embedded.socket_dir(embedded.get_server(data_dir))
        with psycopg.connect(
            host=socket_dir, user="postgres", dbname="postgres", autocommit=True
        ) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        url = f"postgresql://postgres@/{name}?host={socket_dir}"
    os.environ["DATABASE_URL"] = url
    os.environ.pop("CELERY_BROKER_URL", None)  # seeding runs eagerly, in this process
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    settings.MEMORYHUB = {"THROTTLE_RATE": None}
    call_command("migrate", interactive=False, verbosity=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.load", description=__doc__)
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--records", type=int, default=200, help="seed records per tenant")
    parser.add_argument(
        "--local-cache",
        action="store_true",
        help="give gunicorn no REDIS_URL (each worker caches in its own memory)",
    )
    parser.add_argument("--database", default="memoryhub_load")
    args = parser.parse_args(argv)
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)
    sys.path.insert(0, str(ROOT))
    _setup_database(args.database)
    logs = ROOT / "benchmarks" / ".cache"
    figures = measure(
        logs,
        clients=args.clients,
        seconds=args.seconds,
        records=args.records,
        shared_cache=not args.local_cache,
    )
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
