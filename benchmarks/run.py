"""The benchmark run: ingest, query latency, recall, concurrency; REPORT.md and results.json.

Everything runs on one machine in one run, side by side: memoryhub's paths and the
floors they are measured against (a raw binary COPY of precomputed vectors, one raw SQL
statement on the same index, exact numpy search).
"""

from __future__ import annotations

import functools
import json
import os
import platform
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tqdm import tqdm

from benchmarks import api_cost
from benchmarks.load import measure as measure_load
from benchmarks.load import percentiles, start_gunicorn, stop

ROOT = Path(__file__).resolve().parent.parent
SCALES = {"tiny": 1_000, "small": 10_000, "medium": 100_000, "large": 1_000_000}
#: Tenants per scale: one holds 30% of the records, one 10%, the rest share 60%.
TENANTS = {"tiny": 100, "small": 100, "medium": 100, "large": 1_000}
#: Largest scale whose run measures the paths that grow slowest with the record count
#: (the incremental floor, the service in one process, the LangGraph peer).
EVERY_PATH_UP_TO = 100_000
QUERIES = 60
K = 10
#: Queries per selectivity in the filtered-recall measurement.
FILTERED_QUERIES = 100
#: Seconds of the mixed-load scenario per scale.
LOAD_SECONDS = {"tiny": 5.0, "small": 30.0, "medium": 60.0, "large": 60.0}


def timed(fn: Callable[[], Any], repeat: Iterable[Any]) -> list[float]:
    samples = []
    for _ in repeat:
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return samples


# --- setup -------------------------------------------------------------------------------


def setup_django(database: str, *, fresh: bool = True) -> None:
    """Point the site at a dedicated benchmark database (embedded server by default),
    created afresh unless ``fresh`` is false (then the last run's, as it left it)."""
    if not os.environ.get("BENCH_DATABASE_URL"):
        from memoryhub.contrib.embedded_postgres import server as embedded

        data_dir = Path(os.environ.get("MEMORYHUB_DATA_DIR") or ROOT / ".memoryhub") / "postgres"
        srv = embedded.get_server(data_dir)
        import psycopg
        from psycopg import sql

        with psycopg.connect(
            host=embedded.socket_dir(srv), user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", [database]
            ).fetchone()
            if fresh or not exists:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(database)
                    )
                )
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
        os.environ["BENCH_DATABASE_URL"] = (
            f"postgresql://postgres@/{database}?host={embedded.socket_dir(srv)}"
        )
    os.environ["DATABASE_URL"] = os.environ["BENCH_DATABASE_URL"]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # Measured as deployed (no query log on every cursor), like the gunicorn it starts.
    os.environ.setdefault("DEBUG", "0")
    os.environ.setdefault("SECRET_KEY", "bench-" + uuid.uuid4().hex)
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    # BENCH_MEMORYHUB (JSON): settings a run changes, e.g. to try another value.
    settings.MEMORYHUB = {
        "CACHE_TTL": 0,
        "THROTTLE_RATE": None,
        "MAX_WRITE_ITEMS": 500,
        # The filtered-recall questions filter on metadata.bucket, as an operator who
        # filters on a key would declare it (services.filter_indexes).
        "INDEXED_METADATA_KEYS": ["bucket"],
        **json.loads(os.environ.get("BENCH_MEMORYHUB") or "{}"),
    }
    call_command("migrate", interactive=False, verbosity=0)


def tenant_sizes(total: int, tenants: int = 100) -> list[int]:
    """One tenant holds 30%, one 10%, the rest share 60% with a Zipf-like skew."""
    weights = [0.30, 0.10] + [1 / (rank**0.8) for rank in range(1, tenants - 1)]
    tail = sum(weights[2:])
    weights = weights[:2] + [0.60 * w / tail for w in weights[2:]]
    sizes = [max(1, int(total * w)) for w in weights]
    sizes[0] += total - sum(sizes)
    return sizes


def loaded_tenants(total: int, tenants: int) -> tuple[list[Any], list[int]]:
    """The tenants a previous run of the scale created and loaded (``--reuse``)."""
    from memoryhub.scope import Scope
    from tenants.models import Domain

    scopes = [
        Scope.for_domain(Domain.objects.get(org__slug=f"tenant-{n}", slug="docs"))
        for n in range(tenants)
    ]
    return scopes, tenant_sizes(total, tenants)


def make_tenants(total: int, tenants: int = 100) -> tuple[list[Any], list[int]]:
    """``tenants`` tenants: one holds 30%, one 10%, the rest share 60% with a Zipf-like
    skew."""
    from memoryhub.scope import Scope
    from memoryhub.services import knowledge_bases
    from tenants.models import Domain, Org

    sizes = tenant_sizes(total, tenants)
    scopes = []
    for n in range(tenants):
        org = Org.objects.create(slug=f"tenant-{n}", name=f"Tenant {n}")
        domain = Domain.objects.create(org=org, slug="docs")
        scope = Scope.for_domain(domain)
        knowledge_bases.ensure_knowledge_base(scope, "memory")
        scopes.append(scope)
    return scopes, sizes


# --- queries ---------------------------------------------------------------------------------


def tenant_matrix(scope: Any) -> tuple[list[str], Any]:
    import numpy as np

    from memoryhub.models import MemoryRecord

    rows = list(
        MemoryRecord.unscoped.filter(
            org_id=scope.org_id, domain_id=scope.domain_id, status="indexed"
        ).values_list("id", "embedding")
    )
    return [str(pk) for pk, _ in rows], np.array([vector for _, vector in rows], dtype=np.float32)


_ITEM_COLUMNS = (
    "r.id, r.content, kb.name, r.metadata, r.key, r.kind, r.namespace, r.tags, r.created_at"
)
_JOIN_ITEMS = (
    "JOIN memoryhub_memoryrecord r ON r.id = c.id "
    "JOIN memoryhub_knowledgebase kb ON kb.id = r.knowledge_base_id"
)


@functools.cache
def _hybrid_choices(org_id: int, domain_id: int) -> tuple[float, bool]:
    """What the service's compiled plan knows of a domain (read once, as the plan is): the
    hybrid weight and whether its keyword leg ranks the rarest words' records."""
    from memoryhub.scope import Scope
    from memoryhub.services import word_statistics
    from memoryhub.services.query.plans import hybrid_weight

    scope = Scope(org_id=org_id, domain_id=domain_id)
    return hybrid_weight(scope), word_statistics.applies(scope)


def raw_sql(
    scope: Any,
    vector: list[float],
    exact: bool,
    where_bucket: int | None = None,
    text: str | None = None,
    ef_search: int | None = None,
    covers: int | None = None,
    every_match: bool = False,
) -> list[str]:
    """The floor: one statement doing the service's work with the plan it would pick.

    The same predicates (tenant, namespace, expiry, model, status), the exact scan or the
    HNSW iterative scan (with the service's ``ef_search``, which is lower on a tenant's
    own index), the final rows with their content; with ``text``, hybrid: both legs,
    their min-max normalised weighted fusion and the final rows in SQL. One message to the server, the HNSW settings included, as
    the service sends it. The HNSW leg names the vectors its index holds, as the
    service's does: those stored row by row, and for a domain's own index the bulk stores
    it ``covers``.
    """
    from django.db import connection

    from memoryhub.conf import memoryhub_settings
    from memoryhub.services import word_statistics
    from memoryhub.services.query import keyword_words

    embedder = memoryhub_settings.embedder()
    literal = "[" + ",".join(repr(float(x)) for x in vector) + "]"
    expression = "embedding" if exact else f"(embedding::vector({embedder.dimensions}))"
    live = (
        "org_id = %s AND domain_id = %s AND namespace = '' "
        "AND (expires_at IS NULL OR expires_at > now())"
    )
    bucket, bucket_params = "", []
    if where_bucket is not None:
        bucket = (
            " AND jsonb_typeof(metadata->'bucket') = 'number' AND (metadata->'bucket') < %s::jsonb"
        )
        bucket_params = [json.dumps(where_bucket)]
    depth = K * 2 + 10 if text is None else max(K * 4, 40)
    held = ""
    if not exact:
        held = " AND vector_batch IS NULL"
        if covers is not None:
            held = f" AND (vector_batch IS NULL OR vector_batch <= {int(covers)})"
    vector_leg = (
        f"SELECT id, {expression} <=> %s::vector AS distance FROM memoryhub_memoryrecord "
        f"WHERE {live} AND embedding_model = %s AND status = 'indexed'{held}{bucket} "
        f"ORDER BY 2 LIMIT {depth}"
    )
    params: list[Any] = [literal, scope.org_id, scope.domain_id, embedder.name, *bucket_params]
    if text is None:
        statement = (
            f"SELECT {_ITEM_COLUMNS}, 1 - c.distance FROM ({vector_leg}) c {_JOIN_ITEMS} "
            f"ORDER BY c.distance LIMIT {K}"
        )
    else:
        words = keyword_words(text) or ""
        weight, rarest_words = _hybrid_choices(scope.org_id, scope.domain_id)
        # A large domain's keyword leg ranks the records holding the query's rarest
        # words, as the service's does (services/word_statistics.py).
        # It ranks at most ranked_at_most(depth) of them, the first the index finds.
        matched, matched_params, first_found = "search_vector @@ q", [], ""
        if rarest_words and not every_match:
            most = word_statistics.ranked_at_most(depth)
            # As the service writes it (twice in a domain holding much of the table).
            match, matched_params = word_statistics.rarest_words_match(
                scope, "search_vector", words, word_statistics.budget(depth), depth, most
            )
            matched = f"{match} AND (search_vector @@ q) IS TRUE"
            first_found = f" LIMIT {most}"
        ranked = (
            "SELECT * FROM (SELECT id, created_at, ts_rank(search_vector, q, 32) AS score "
            "FROM memoryhub_memoryrecord, to_tsquery('english', %s) q "
            f"WHERE {live}{bucket} AND {matched}{first_found}) f "
            f"ORDER BY score DESC, created_at DESC LIMIT {depth}"
        )

        def normalised(leg: str) -> str:
            return (
                f"SELECT id, CASE WHEN max(score) OVER () > min(score) OVER () THEN "
                f"(score - min(score) OVER ()) / (max(score) OVER () - min(score) OVER ()) "
                f"ELSE 1.0 END AS score FROM {leg}"
            )

        # The service's work: each leg min-max normalised, the vector leg weighted (its
        # weight goes to the other leg when one is empty).
        statement = (
            f"WITH v AS (SELECT id, 1 - distance AS score FROM ({vector_leg}) s), "
            f"k AS (SELECT id, score FROM ({ranked}) o), "
            "w AS (SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM k) THEN 1.0 "
            "WHEN NOT EXISTS (SELECT 1 FROM v) THEN 0.0 ELSE %s END AS vector), "
            "c AS (SELECT id, sum(score) AS score FROM ("
            f"SELECT n.id, n.score * w.vector AS score FROM ({normalised('v')}) n, w "
            f"UNION ALL SELECT n.id, n.score * (1 - w.vector) FROM ({normalised('k')}) n, w"
            f") u GROUP BY id ORDER BY score DESC LIMIT {K}) "
            f"SELECT {_ITEM_COLUMNS}, c.score FROM c {_JOIN_ITEMS} ORDER BY c.score DESC"
        )
        params += [words, scope.org_id, scope.domain_id, *bucket_params, *matched_params, weight]
    prefix: list[str] = []
    if not exact:
        prefix = [
            "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), "
            "set_config('enable_sort', 'off', true), "
            f"set_config('hnsw.max_scan_tuples', '{memoryhub_settings.HNSW_MAX_SCAN_TUPLES}', true), "
            f"set_config('hnsw.ef_search', '{ef_search or max(memoryhub_settings.HNSW_EF_SEARCH, depth)}', true)"
        ]
    with connection.cursor() as cursor:
        cursor.execute(";\n".join([*prefix, statement]), params)
        if prefix:
            cursor.nextset()
        return [str(row[0]) for row in cursor.fetchall()]


class KeepAliveClient:
    """One keep-alive HTTP/1.1 connection (``http.client``): the thinnest client, so that
    latency through the API is the server's, not a client library's."""

    def __init__(self, base_url: str) -> None:
        import http.client
        from urllib.parse import urlsplit

        parts = urlsplit(base_url)
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)

    def post_json(self, path: str, body: Any, headers: dict[str, str]) -> bytes:
        import http.client

        payload = json.dumps(body).encode()
        headers = {**headers, "Content-Type": "application/json"}
        try:
            self.connection.request("POST", path, body=payload, headers=headers)
            response = self.connection.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # The server closed the idle connection (gunicorn's keep-alive timeout).
            self.connection.close()
            self.connection.request("POST", path, body=payload, headers=headers)
            response = self.connection.getresponse()
        content = response.read()
        if response.status != 200:
            raise RuntimeError(f"{path}: HTTP {response.status}: {content[:200]!r}")
        return content

    def close(self) -> None:
        self.connection.close()


def measure_peer(
    scopes: list[Any],
    sizes: list[int],
    texts: list[str],
    queries: dict[str, list[tuple[str, int, int]]],
) -> dict[str, Any]:
    """LangGraph's PostgresStore with the same embedder on the same PostgreSQL."""
    try:
        from langgraph.store.base import PutOp
        from langgraph.store.postgres import PostgresStore
    except ImportError as exc:
        return {"skipped": f"langgraph-checkpoint-postgres is not installed ({exc})"}
    from memoryhub.conf import memoryhub_settings

    embedder = memoryhub_settings.embedder()
    url = os.environ["BENCH_DATABASE_URL"]
    index = {"dims": embedder.dimensions, "embed": embedder.embed_documents, "fields": ["text"]}
    figures: dict[str, Any] = {}
    with PostgresStore.from_conn_string(url, index=index) as store:
        store.setup()
        bar = tqdm(total=len(texts), desc="ingest (LangGraph peer)", unit="record")
        started = time.perf_counter()
        offset = 0
        for tenant, size in enumerate(sizes):
            for start in range(offset, offset + size, 500):
                stop = min(start + 500, offset + size)
                store.batch(
                    [
                        PutOp(namespace=(f"tenant-{tenant}",), key=str(i), value={"text": texts[i]})
                        for i in range(start, stop)
                    ]
                )
                bar.update(stop - start)
            offset += size
        bar.close()
        seconds = time.perf_counter() - started
        figures["ingest"] = {
            "records": len(texts),
            "seconds": round(seconds, 2),
            "records_per_second": round(len(texts) / seconds, 1),
        }
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")  # as for memoryhub's table
        for label, pairs in queries.items():
            tenant = pairs[0][2] if len(pairs[0]) > 2 else 0
            samples, hits = [], 0
            for question, target, *_ in pairs:
                started = time.perf_counter()
                found = store.search((f"tenant-{tenant}",), query=question, limit=K)
                samples.append(time.perf_counter() - started)
                hits += str(target) in [item.key for item in found]
            figures[label] = {**percentiles(samples), "recall@10": round(hits / len(pairs), 3)}
    return figures


#: The steady-state concurrency measurement: each client asks for this long, and only the
#: requests finishing after the first ``STEADY_WARM_SECONDS`` count.
STEADY_SECONDS = {"tiny": 3.0, "small": 6.0, "medium": 12.0, "large": 12.0}
STEADY_WARM_SECONDS = 2.0
#: More than any client count answers a second on 2 cores.
STEADY_MOST_QPS = 400
#: Requests per API key in the steady measurement: below the site's default throttle of
#: 1,200 a minute, whatever the window.
STEADY_REQUESTS_PER_KEY = 1000


def measure_concurrency(
    base_url: str, scope: Any, texts: list[str], rng: random.Random, seconds: float
) -> dict[str, Any]:
    """QPS and latency at 1, 4 and 16 concurrent clients (hybrid queries, distinct texts),
    measured twice: as a burst (each client asks a fixed number of questions on an
    ``httpx`` client; QPS is every request over the wall time from the first start to the
    last finish, so the clients' spread of finishing times is in it: the method of
    ``report.HYBRID_QPS_BEFORE``, the baseline its target doubles), and steadily
    (:func:`steady_concurrency`)."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from benchmarks.corpus import known_item_query
    from tenants.models import ApiKey

    figures: dict[str, Any] = {}
    for clients in (1, 4, 16):
        per_client = max(8, 96 // clients)
        # One key per client: the per-key throttle must not be what is measured.
        keys = [
            ApiKey.objects.create_key(name="load", org_id=scope.org_id, can_read=True)[1]
            for _ in range(clients)
        ]
        questions = [
            [known_item_query(rng.choice(texts), rng) for _ in range(per_client)]
            for _ in range(clients)
        ]

        def run_client(index: int) -> tuple[list[float], int]:
            samples, errors = [], 0
            with httpx.Client(
                base_url=base_url, timeout=60, headers={"Authorization": f"Api-Key {keys[index]}"}
            ) as client:
                for question in questions[index]:
                    started = time.perf_counter()
                    response = client.post(
                        "/api/v1/domains/docs/query", json={"query": question, "k": K}
                    )
                    samples.append(time.perf_counter() - started)
                    errors += response.status_code != 200
            return samples, errors

        started = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            outcomes = list(pool.map(run_client, range(clients)))
        wall = time.perf_counter() - started
        samples = [sample for outcome in outcomes for sample in outcome[0]]
        figures[str(clients)] = {
            "requests": len(samples),
            "qps": round(len(samples) / wall, 1),
            **percentiles(samples),
            "errors": sum(outcome[1] for outcome in outcomes),
            "steady": steady_concurrency(base_url, scope, texts, clients, seconds),
        }
    return figures


def steady_concurrency(
    base_url: str, scope: Any, texts: list[str], clients: int, seconds: float
) -> dict[str, Any]:
    """``clients`` clients asking hybrid questions back to back for ``seconds``, each on
    its own keep-alive ``http.client`` connection and API key: QPS and latency of the
    requests finishing between ``STEADY_WARM_SECONDS`` and the end (every client busy,
    the workers warm; no client's last request waits for the others), and the errors
    of every request. Its questions come from their own random generator, so the run's
    other phases ask the same questions as before."""
    from concurrent.futures import ThreadPoolExecutor

    from benchmarks.corpus import known_item_query
    from tenants.models import ApiKey

    rng = random.Random(clients)
    # More questions than a client can ask in ``seconds``: every text distinct.
    asks = int(seconds * STEADY_MOST_QPS / clients) + 20
    questions = [
        [known_item_query(rng.choice(texts), rng) for _ in range(asks)] for _ in range(clients)
    ]
    # Keys enough that no key reaches the site's per-key throttle (THROTTLE_RATE, 1200
    # requests a minute by default) within the window: the server's speed is measured,
    # not its throttle (a throttled request is a fast 429).
    per_client = -(-asks // STEADY_REQUESTS_PER_KEY)
    keys = [
        [
            ApiKey.objects.create_key(name="steady", org_id=scope.org_id, can_read=True)[1]
            for _ in range(per_client)
        ]
        for _ in range(clients)
    ]
    started = time.perf_counter()
    window = (started + STEADY_WARM_SECONDS, started + seconds)

    def run_client(index: int) -> tuple[list[float], int, int]:
        client = KeepAliveClient(base_url)
        own = keys[index]
        counted, errors, asked = [], 0, 0
        try:
            for number, question in enumerate(questions[index]):
                headers = {"Authorization": f"Api-Key {own[number % len(own)]}"}
                began = time.perf_counter()
                if began >= window[1]:
                    break
                asked += 1
                try:
                    client.post_json(
                        "/api/v1/domains/docs/query", {"query": question, "k": K}, headers
                    )
                except RuntimeError:
                    errors += 1  # not counted: only answers are
                    continue
                finished = time.perf_counter()
                if window[0] <= finished <= window[1]:
                    counted.append(finished - began)
        finally:
            client.close()
        return counted, errors, asked

    with ThreadPoolExecutor(clients) as pool:
        outcomes = list(pool.map(run_client, range(clients)))
    samples = [sample for outcome in outcomes for sample in outcome[0]]
    return {
        "warm_seconds": STEADY_WARM_SECONDS,
        "seconds": round(window[1] - window[0], 1),
        "requests": len(samples),
        "qps": round(len(samples) / (window[1] - window[0]), 1),
        **percentiles(samples),
        "errors": sum(outcome[1] for outcome in outcomes),
        "asked": sum(outcome[2] for outcome in outcomes),
    }


def measure_queries(
    scopes: list[Any],
    sizes: list[int],
    texts: list[str],
    rng: random.Random,
    logs: Path,
    scale: str = "small",
) -> tuple[dict[str, Any], dict[str, list[tuple[str, int, int]]]]:
    """The large tenant and a 1% one, each asked ``QUERIES`` known-item questions: the
    latency of the service, the API and the floors, the floors' overlap with the service,
    the API's fixed cost itemised (``benchmarks.api_cost``, vector queries: their service
    time varies least, so the parts stand out of the noise) and known-item recall per
    mode; then QPS at 1, 4 and 16 clients through gunicorn. Also returns the questions
    asked (with their targets), for the peer."""
    from benchmarks.corpus import known_item_query
    from memoryhub.services import word_statistics
    from tenants.models import ApiKey

    small_index = min(range(len(sizes)), key=lambda i: abs(sizes[i] - sum(sizes) * 0.01))
    tenants = {"large (30%)": 0, "1% tenant": small_index}
    keys = {
        label: ApiKey.objects.create_key(name="bench", org_id=scopes[index].org_id, can_read=True)[
            1
        ]
        for label, index in tenants.items()
    }
    server, base_url = start_gunicorn(logs, memoryhub=api_cost.SERVED)
    figures: dict[str, dict[str, Any]] = {
        "latency_ms": {},
        "floor_overlap": {},
        "api_cost": {},
        "known_item": {},
    }
    peer_queries: dict[str, list[tuple[str, int, int]]] = {}
    try:
        client = KeepAliveClient(base_url)
        for label, index in tenants.items():
            scope, start, size = scopes[index], sum(sizes[:index]), sizes[index]
            picks = [start + rng.randrange(size) for _ in range(QUERIES)]
            questions = [known_item_query(texts[i], rng) for i in picks]
            rows, overlap = tenant_latency(scope, size, questions, client, keys[label])
            figures["latency_ms"][label] = rows
            figures["floor_overlap"][label] = overlap
            figures["api_cost"][label] = api_cost.measure(
                scope, keys[label], questions, base_url, mode="vector"
            )
            peer_queries[label] = [
                (q, pick, index) for q, pick in zip(questions, picks, strict=True)
            ]
            figures["known_item"][label] = known_item_recall(scope, questions, picks, texts)
            if word_statistics.applies(scope):
                # The same questions with the keyword leg ranking every match (as
                # without word statistics), then the statistics back.
                word_statistics.forget(scope)
                figures.setdefault("known_item_every_match", {})[label] = known_item_recall(
                    scope, questions, picks, texts
                )
                word_statistics.count(scope)
        client.close()
        concurrency = measure_concurrency(
            base_url, scopes[0], texts[: sizes[0]], rng, STEADY_SECONDS[scale]
        )
    finally:
        stop(server)
    return {"concurrency": concurrency, **figures}, peer_queries


def tenant_latency(
    scope: Any, size: int, questions: list[str], client: KeepAliveClient, key: str
) -> tuple[dict[str, Any], dict[str, float]]:
    """One tenant's latency per path: the service and the API (vector, hybrid), the raw
    SQL floors on the plan the service picks, exact numpy search; and how much of the
    service's top k the floors return."""
    import numpy as np

    from memoryhub.conf import memoryhub_settings
    from memoryhub.services import query as query_service
    from memoryhub.services.vector_indexes import own_index

    embedder = memoryhub_settings.embedder()
    ids, matrix = tenant_matrix(scope)
    exact_plan = size <= memoryhub_settings.EXACT_SCAN_THRESHOLD
    # The floors search HNSW with the service's ef_search for this scope and mode.
    plans = {
        mode: query_service.plan_for(
            scope, query_service.QueryRequest.build(query="plan", k=K, mode=mode)
        )
        for mode in ("vector", "hybrid")
    }
    ef = {
        mode: int(plan.settings["hnsw.ef_search"]) if plan.settings else None
        for mode, plan in plans.items()
    }
    rows: dict[str, Any] = {
        "records": size,
        "plan": plans["vector"].strategy,
        "ef_search": ef["vector"],
    }
    rows.update(served_latency(scope, questions, client, key))
    # The bulk stores the domain's own index covers (its HNSW leg names them).
    own = own_index(scope, embedder.name)
    covers = own.covers if own is not None else None
    query_vectors = [embedder.embed_query(q) for q in questions]
    vectors = iter(query_vectors)
    rows["raw sql vector"] = percentiles(
        timed(
            lambda: raw_sql(
                scope, next(vectors), exact_plan, ef_search=ef["vector"], covers=covers
            ),
            range(QUERIES),
        )
    )

    def hybrid_floor(every_match: bool = False) -> list[float]:
        """The hybrid floor's times over the questions (``every_match``: its keyword leg
        ranks every match, as without word statistics)."""
        pairs = iter(zip(query_vectors, questions, strict=True))

        def one() -> list[str]:
            vector, question = next(pairs)
            return raw_sql(
                scope,
                vector,
                exact_plan,
                text=question,
                ef_search=ef["hybrid"],
                covers=covers,
                every_match=every_match,
            )

        return timed(one, range(QUERIES))

    rows["raw sql hybrid"] = percentiles(hybrid_floor())
    if _hybrid_choices(scope.org_id, scope.domain_id)[1]:
        rows["raw sql hybrid, every match ranked"] = percentiles(hybrid_floor(every_match=True))
    overlap = floor_overlap(scope, questions, query_vectors, exact_plan, ef, covers)
    vectors = iter(query_vectors)
    rows["numpy exact"] = percentiles(
        timed(
            lambda: np.argsort(-(matrix @ np.array(next(vectors), dtype=np.float32)))[:K],
            range(QUERIES),
        )
    )
    return rows, overlap


def served_latency(
    scope: Any, questions: list[str], client: KeepAliveClient, key: str
) -> dict[str, Any]:
    """Latency of the service in process and of the API through gunicorn, per mode.

    Each path answers one question untimed first: the API's keep-alive connection stays
    with one gunicorn worker, whose first request would otherwise be in the figures (its
    imports, embedder and database connection), as the maximum, which is p99 of 60.
    """
    from memoryhub.services import query as query_service

    rows: dict[str, Any] = {}
    headers = {"Authorization": f"Api-Key {key}"}
    for mode in ("vector", "hybrid"):
        query_service.query(scope, query=questions[-1], k=K, mode=mode)
        client.post_json(
            "/api/v1/domains/docs/query", {"query": questions[-1], "k": K, "mode": mode}, headers
        )
        iterator = iter(questions)
        rows[f"service {mode}"] = percentiles(
            timed(
                lambda: query_service.query(scope, query=next(iterator), k=K, mode=mode),
                range(QUERIES),
            )
        )
        iterator = iter(questions)
        rows[f"api {mode}"] = percentiles(
            timed(
                lambda: client.post_json(
                    "/api/v1/domains/docs/query",
                    {"query": next(iterator), "k": K, "mode": mode},
                    headers,
                ),
                range(QUERIES),
            )
        )
    return rows


def floor_overlap(
    scope: Any,
    questions: list[str],
    query_vectors: list[Any],
    exact_plan: bool,
    ef: dict[str, int | None],
    covers: int | None = None,
) -> dict[str, float]:
    """The floors do the service's work: the share of the service's top k that they
    return too, per mode, over the first 20 questions."""
    from memoryhub.services import query as query_service

    overlap: dict[str, list[float]] = {"vector": [], "hybrid": []}
    for vector, question in list(zip(query_vectors, questions, strict=True))[:20]:
        for mode, text in (("vector", None), ("hybrid", question)):
            served = query_service.query(scope, query=question, k=K, mode=mode).items
            floor = raw_sql(scope, vector, exact_plan, text=text, ef_search=ef[mode], covers=covers)
            overlap[mode].append(len({i.id for i in served} & set(floor)) / K)
    return {m: round(statistics.mean(v), 3) for m, v in overlap.items()}


def known_item_recall(
    scope: Any, questions: list[str], picks: list[int], texts: list[str]
) -> dict[str, dict[str, float]]:
    """Known-item recall per mode: where the passage each question was made from ranks."""
    from memoryhub.models import MemoryRecord
    from memoryhub.services import query as query_service

    id_of = {
        content: str(pk)
        for pk, content in MemoryRecord.unscoped.filter(
            org_id=scope.org_id,
            domain_id=scope.domain_id,
            content__in=[texts[i] for i in picks],
        ).values_list("id", "content")
    }
    recall: dict[str, dict[str, float]] = {}
    for mode in ("vector", "keyword", "hybrid"):
        ranks = []
        for question, pick in zip(questions, picks, strict=True):
            found = [
                item.id for item in query_service.query(scope, query=question, k=K, mode=mode).items
            ]
            target = id_of.get(texts[pick])
            ranks.append(found.index(target) + 1 if target in found else None)
        recall[mode] = {
            "recall@1": round(sum(r == 1 for r in ranks) / len(ranks), 3),
            "recall@10": round(sum(r is not None for r in ranks) / len(ranks), 3),
            "mrr": round(sum(1 / r for r in ranks if r) / len(ranks), 3),
        }
    return recall


def measure_filtered_recall(
    scope: Any, size: int, texts: list[str], rng: random.Random
) -> dict[str, Any]:
    """Filtered recall@10 against exact search inside the large tenant (whose passages
    are the first ``size``): as served (the service picks exact or HNSW by the filtered
    scope's size), and with HNSW forced."""
    from django.conf import settings as django_settings

    from benchmarks.corpus import known_item_query
    from memoryhub.conf import memoryhub_settings
    from memoryhub.models import MemoryRecord

    embedder = memoryhub_settings.embedder()
    ids, matrix = tenant_matrix(scope)
    buckets = dict(
        (str(pk), b)
        for pk, b in MemoryRecord.unscoped.filter(
            org_id=scope.org_id, domain_id=scope.domain_id
        ).values_list("id", "metadata__bucket")
    )
    questions = [known_item_query(texts[rng.randrange(size)], rng) for _ in range(FILTERED_QUERIES)]
    results = {"filtered_recall": filtered_recall(scope, embedder, ids, matrix, buckets, questions)}
    django_settings.MEMORYHUB = {**django_settings.MEMORYHUB, "EXACT_SCAN_THRESHOLD": 0}
    try:
        results["filtered_recall_hnsw"] = filtered_recall(
            scope, embedder, ids, matrix, buckets, questions
        )
    finally:
        django_settings.MEMORYHUB = {
            key: value
            for key, value in django_settings.MEMORYHUB.items()
            if key != "EXACT_SCAN_THRESHOLD"
        }
    return results


def filtered_recall(
    scope: Any,
    embedder: Any,
    ids: list[str],
    matrix: Any,
    buckets: dict[str, int],
    questions: list[str],
) -> dict[str, Any]:
    """Recall@10 of vector queries filtered to 1%, 10% and 100% of the tenant's records
    (``metadata.bucket``), against exact search over the same rows."""
    import numpy as np

    from memoryhub.services import query as query_service

    filtered: dict[str, Any] = {}
    for label, limit in (("1%", 1), ("10%", 10), ("100%", None)):
        recalls, short, plans = [], 0, set()
        mask = np.array([limit is None or buckets[i] < limit for i in ids])
        for question in questions:
            vector = np.array(embedder.embed_query(question), dtype=np.float32)
            scores = matrix @ vector
            scores[~mask] = -np.inf
            truth = [ids[i] for i in np.argsort(-scores)[:K] if mask[i]]
            where = None if limit is None else {"bucket": {"$lt": limit}}
            result = query_service.query(scope, query=question, k=K, mode="vector", where=where)
            got = [item.id for item in result.items]
            plans.add(result.strategy)
            short += len(got) < min(K, int(mask.sum()))
            recalls.append(len(set(truth) & set(got)) / max(1, len(truth)))
        filtered[label] = {
            "recall@10": round(statistics.mean(recalls), 3),
            "queries_short_of_k": short,
            "rows_matching": int(mask.sum()),
            "plan": "/".join(sorted(plans)),
        }
    return filtered


# --- the run ---------------------------------------------------------------------------------


def describe_setup() -> dict[str, Any]:
    """The machine, the servers and the settings the figures are measured with."""
    from django.db import connection

    from memoryhub.conf import memoryhub_settings

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT version(), (SELECT extversion FROM pg_extension WHERE extname='vector'), "
            "current_setting('shared_buffers')"
        )
        pg_version, pgvector_version, shared_buffers = cursor.fetchone()
    embedder = memoryhub_settings.embedder()
    return {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "postgres": pg_version.split(",")[0],
            "pgvector": pgvector_version,
            "shared_buffers": shared_buffers,
        },
        "settings": {
            "embedder": embedder.name,
            "exact_scan_threshold": memoryhub_settings.EXACT_SCAN_THRESHOLD,
            "hnsw_ef_search": memoryhub_settings.HNSW_EF_SEARCH,
            "hnsw_max_scan_tuples": memoryhub_settings.HNSW_MAX_SCAN_TUPLES,
            "tenant_index_min_records": memoryhub_settings.TENANT_INDEX_MIN_RECORDS,
            "indexed_metadata_keys": list(memoryhub_settings.INDEXED_METADATA_KEYS),
            "index_batch_size": memoryhub_settings.INDEX_BATCH_SIZE,
            "k": K,
        },
    }


def measure_ingest(
    scopes: list[Any], sizes: list[int], texts: list[str], logs: Path, scale: str
) -> dict[str, Any]:
    """Ingest (benchmarks/ingest.py): the bulk and incremental floors first (the records
    table as a load finds it, no domain's own index yet), the service in one process,
    MiniLM's pipeline against bare ``encode()``, then the service with 2 workers; each
    service clock stops once the sweeper's settling maintenance is done."""
    from django.db import connection

    from benchmarks import ingest
    from tests.programs import redis_server

    every_path = len(texts) <= EVERY_PATH_UP_TO
    results: dict[str, Any] = {
        "floors": ingest.floors(scopes, sizes, texts, incremental_floor=every_path)
    }
    if every_path:
        results["single_process"] = ingest.single_process(scopes, sizes, texts)
        ingest.reset()
    else:
        results["single_process"] = {"skipped": ingest.SKIPPED_AT_SCALE}
    with redis_server(logs) as redis:
        results["minilm"] = ingest.minilm(
            scopes, ingest.MINILM_RECORDS[scale], texts, redis.url(db=12), logs
        )
        ingest.reset()
        results["service"] = ingest.with_workers(scopes, sizes, texts, redis.url(db=12), logs)
    results["ratios"] = ingest.ratios(results)
    results["ratio"] = results["ratios"]["service/bulk"]
    with connection.cursor() as cursor:
        # What autovacuum does soon after a load in production: the planner sees the
        # real table.
        cursor.execute("VACUUM (ANALYZE) memoryhub_memoryrecord")
    settle_writes()
    return results


def settle_writes() -> None:
    """A checkpoint before the queries are timed: the load's dirty pages written out
    now, not by a checkpoint spread over the query phase (where its writes stall the
    queries being timed)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")


def main(scale: str, output: Path, *, reuse: bool = False) -> dict[str, Any]:
    """Measure everything at ``scale`` on a fresh benchmark database; write
    ``results-<scale>.json`` and REPORT.md into ``output`` and return the results.

    ``reuse``: the last run's database as it left it and its ingest figures (from
    ``results-<scale>.json``); only the phases after ingest run again.

    The phases run in this order and share one random generator, so a scale asks the
    same questions every run: ingest, queries (latency, recall, concurrency), the peer,
    filtered recall, mixed load.
    """
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)

    from benchmarks.corpus import passages

    total = SCALES[scale]
    logs = ROOT / "benchmarks" / ".cache"
    logs.mkdir(parents=True, exist_ok=True)
    setup_django(f"memoryhub_bench_{scale}", fresh=not reuse)
    results: dict[str, Any] = {
        "scale": scale,
        "records": total,
        "tenants": TENANTS[scale],
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        **describe_setup(),
    }
    from benchmarks import host

    results["host"] = {"start": host.measure()}
    sys.stderr.write(f"corpus: {total} passages of docstrings\n")
    texts = passages(total)
    results["distinct_passages"] = len({text.split(" (part ")[0] for text in texts})
    if reuse:
        previous = json.loads((output / f"results-{scale}.json").read_text())
        results["ingest"] = previous["ingest"]
        results["ingest_date"] = previous.get("ingest_date", previous["date"])
        scopes, sizes = loaded_tenants(total, TENANTS[scale])
        settle_writes()
    else:
        scopes, sizes = make_tenants(total, TENANTS[scale])
        results["ingest"] = measure_ingest(scopes, sizes, texts, logs, scale)
    rng = random.Random(42)
    served, peer_queries = measure_queries(scopes, sizes, texts, rng, logs, scale)
    results.update(served)
    if total <= EVERY_PATH_UP_TO:
        results["peer"] = measure_peer(scopes, sizes, texts, peer_queries)
    else:
        from benchmarks.ingest import SKIPPED_AT_SCALE

        results["peer"] = {"skipped": SKIPPED_AT_SCALE}
    results.update(measure_filtered_recall(scopes[0], sizes[0], texts, rng))
    # Mixed load: 32 clients, 80% queries, 15% writes, 5% forgets, 10 tenants,
    # every response checked for other tenants' and forgotten memory.
    results["load"] = measure_load(logs, seconds=LOAD_SECONDS[scale], records=100)
    results["host"]["end"] = host.measure()

    output.mkdir(parents=True, exist_ok=True)
    (output / f"results-{scale}.json").write_text(json.dumps(results, indent=2, default=str))
    from benchmarks.report import write_report

    write_report(results, output / "REPORT.md")
    return results
