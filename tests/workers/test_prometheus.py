"""A real Prometheus scrapes a real site (gunicorn, two processes) and its Celery worker,
all writing their counters to one ``PROMETHEUS_MULTIPROC_DIR``: PromQL through
Prometheus's HTTP API sees each metric move as two orgs write, query, are refused, erase
and import, and as the worker indexes what they wrote."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from memoryhub.services import imports, knowledge_bases
from tests.factories import create_api_key
from tests.programs import (
    celery_broker,
    database_url,
    free_port,
    require_program,
    site_environment,
    start_gunicorn,
    start_worker,
    stop_process,
    wait_for,
)

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "scrape-token-for-the-test"


@pytest.fixture
def prometheus_binary() -> str:
    return require_program("prometheus")


def start_prometheus(binary: str, target_port: int, folder: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    config = folder / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: memoryhub\n"
        f"    authorization:\n      credentials: {TOKEN}\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n"
    )
    log = (folder / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}"]
        + [f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(f"{base}/-/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return process.poll() is not None

    wait_for(ready, timeout=60, what="Prometheus to be ready")
    assert process.poll() is None, (folder / "prometheus.log").read_text()
    return process, base


def promql(base: str, expression: str) -> float | None:
    answer = httpx.get(f"{base}/api/v1/query", params={"query": expression}, timeout=5).json()
    results = answer["data"]["result"]
    return float(results[0]["value"][1]) if results else None


def test_prometheus_sees_each_metric_move_across_web_processes_and_the_worker(
    tenant, other_tenant, redis, prometheus_binary, workers, tmp_path
):
    shared = tmp_path / "prometheus-multiproc"
    shared.mkdir()
    environment = {
        "PROMETHEUS_MULTIPROC_DIR": str(shared),
        "MEMORYHUB_METRICS_TOKEN": TOKEN,
    }
    workers.append(
        start_worker(
            redis.url(),
            tmp_path / "worker.log",
            memoryhub={"WORKER_HEARTBEAT_INTERVAL": 1, "METRICS_TOKEN": TOKEN},
            env=environment,
        )
    )
    site_env = {
        **site_environment(database_url()),
        **environment,
        "CELERY_BROKER_URL": redis.url(),
    }
    site = start_gunicorn(site_env, tmp_path / "gunicorn.log", workers=2)
    prometheus, base = start_prometheus(prometheus_binary, site.port, tmp_path)
    try:
        knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
        keys = {}
        for name, owner in (("acme", tenant), ("globex", other_tenant)):
            _, keys[name] = create_api_key(
                org=owner.org, can_read=True, can_write=True, can_forget=True
            )

        def client(name: str) -> httpx.Client:
            return httpx.Client(
                base_url=site.url(""),
                headers={"Authorization": f"Api-Key {keys[name]}"},
                timeout=30,
            )

        records = "/api/v1/domains/support/records"
        item = {"content": "Alice invoices in EUR.", "key": "prefs/currency"}
        # Several requests each: gunicorn's two processes both answer some.
        for name in ("acme", "globex"):
            for index in range(3):
                written = client(name).post(
                    records, json={"items": [{**item, "content": f"{item['content']} {index}"}]}
                )
                assert written.status_code == 202, written.text
        refused = client("acme").post(
            records, json={"source": "handbook", "items": [{"content": "guess"}]}
        )
        assert refused.status_code == 403
        asked = client("globex").post("/api/v1/domains/support/query", json={"query": "EUR"})
        assert asked.status_code == 200
        erased = client("acme").post(
            "/api/v1/domains/support/forget", json={"key": "prefs/currency"}
        )
        assert erased.status_code == 200
        memory = knowledge_bases.ensure_knowledge_base(other_tenant.scope, "memory")
        with celery_broker(redis.url()):
            imports.create_job(
                other_tenant.scope,
                memory,
                format="jsonl",
                filename="notes.jsonl",
                text='{"content": "Imported one."}\n{"content": "Imported two."}\n',
            )
        stranger = httpx.post(
            site.url(records), headers={"Authorization": "Api-Key nope"}, timeout=30
        )
        assert stranger.status_code in (401, 403)

        expected = {
            'sum(memoryhub_write_items_total{outcome="accepted"})': 8,
            'sum(memoryhub_write_items_total{outcome="refused"})': 1,
            "sum(memoryhub_queries_total)": 1,
            'sum(memoryhub_erasures_total{kind="key"})': 1,
            'sum(memoryhub_refused_requests_total{reason="authentication"})': 1,
            'sum(memoryhub_requests_total{door="rest",status="202"})': 6,
            "sum(memoryhub_records_indexed_total)": 8,
            'memoryhub_import_jobs{status="done"}': 1,
            "memoryhub_records_pending": 0,
        }

        def seen() -> dict[str, float | None]:
            return {expression: promql(base, expression) for expression in expected}

        wait_for(lambda: seen() == expected, timeout=60, what=f"Prometheus to see {expected}")
        processes = promql(base, "count(count by (pid) (memoryhub_requests_total))")
        assert processes is None or processes >= 1
        labels = httpx.get(f"{base}/api/v1/labels", timeout=5).json()["data"]
        assert not {"org", "domain", "namespace", "key"} & set(labels)
        series = httpx.get(
            f"{base}/api/v1/series", params={"match[]": '{job="memoryhub"}'}, timeout=5
        ).text
        for private in ("acme", "globex", "prefs/currency", "EUR"):
            assert private not in series, private
    finally:
        stop_process(prometheus)
        site.stop()
