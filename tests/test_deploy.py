"""Production settings, structured logs and the read-replica router, run for real.

Settings are read in subprocesses with a clean environment (settings are evaluated once
per process); the logs of real requests come from gunicorn started with the compose
file's own command, and those of tasks from a real Celery worker on Redis.
"""

from __future__ import annotations

import copy
import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from celery import current_app
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from memoryhub.models import MemoryRecord, Observation
from memoryhub.routing import replica_reads
from memoryhub.services import write
from memoryhub.tasks import index_records
from tenants.models import Domain

from .factories import create_api_key
from .programs import ROOT, RedisServer, database_url, free_port, start_redis, wait_for

STRONG_KEY = secrets.token_urlsafe(50)


def run_site(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` after ``django.setup()`` in a fresh process whose only env is ``env``."""
    environment = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **env}
    environment.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    script = "import django, json\ndjango.setup()\nfrom django.conf import settings\n" + code
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    code = f"from django.core.management import call_command\ncall_command(*{list(args)!r})"
    return run_site(code, **env)


#: A production environment: no database is contacted by ``check``.
PRODUCTION = {
    "DEBUG": "0",
    "SECRET_KEY": STRONG_KEY,
    "MEMORYHUB_ERASURE_RECEIPT_KEY": STRONG_KEY[::-1],
    "ALLOWED_HOSTS": "memory.example.com",
    "DATABASE_URL": "postgres://memoryhub@db.invalid:5432/memoryhub",
}


def settings_in(**env: str) -> dict[str, object]:
    names = [
        "DEBUG",
        "SECURE_SSL_REDIRECT",
        "SECURE_HSTS_SECONDS",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS",
        "SECURE_HSTS_PRELOAD",
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "SECURE_PROXY_SSL_HEADER",
        "LOG_FORMAT",
        "DATABASE_ROUTERS",
    ]
    code = (
        f"values = {{name: getattr(settings, name, None) for name in {names!r}}}\n"
        "values['DATABASES'] = {alias: {'TEST': db.get('TEST', {})}"
        " for alias, db in settings.DATABASES.items()}\n"
        "print(json.dumps(values))"
    )
    result = run_site(code, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


# --- settings ------------------------------------------------------------------------------


def test_check_deploy_reports_no_warning_in_production():
    result = manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout + result.stderr


def test_development_defaults_are_untouched():
    values = settings_in()
    assert values["DEBUG"] is True
    assert values["SECURE_SSL_REDIRECT"] is False
    assert values["SECURE_HSTS_SECONDS"] == 0
    assert values["SESSION_COOKIE_SECURE"] is False
    assert values["CSRF_COOKIE_SECURE"] is False
    assert values["LOG_FORMAT"] == "text"
    result = manage("check", "--deploy")
    assert result.returncode == 0, result.stderr
    for warning in ("W004", "W008", "W009", "W012", "W016", "W018"):
        assert f"security.{warning}" in result.stderr, warning
    assert "memoryhub.W002" in result.stderr  # no receipt key of its own


def test_production_hardening_is_on_and_tunable_from_the_environment():
    values = settings_in(**PRODUCTION)
    assert values["SECURE_SSL_REDIRECT"] is True
    assert values["SECURE_HSTS_SECONDS"] == 31_536_000
    assert values["SECURE_HSTS_INCLUDE_SUBDOMAINS"] is True
    assert values["SECURE_HSTS_PRELOAD"] is True
    assert values["SESSION_COOKIE_SECURE"] is True
    assert values["CSRF_COOKIE_SECURE"] is True
    assert values["SECURE_PROXY_SSL_HEADER"] is None
    assert values["LOG_FORMAT"] == "json"
    tuned = settings_in(
        **PRODUCTION,
        SECURE_HSTS_SECONDS="300",
        SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto",
        LOG_FORMAT="text",
    )
    assert tuned["SECURE_HSTS_SECONDS"] == 300
    assert tuned["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert tuned["LOG_FORMAT"] == "text"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEBUG": "0"}, "SECRET_KEY must be set when DEBUG is off."),
        ({**PRODUCTION, "LOG_FORMAT": "xml"}, "LOG_FORMAT must be json or text"),
        ({**PRODUCTION, "SECURE_HSTS_SECONDS": "a year"}, "SECURE_HSTS_SECONDS must be an"),
    ],
)
def test_production_refuses_to_start_misconfigured(env, message):
    result = run_site("print('started')", **env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr
    assert "started" not in result.stdout


def test_a_replica_url_adds_a_mirrored_alias_and_the_router():
    assert settings_in(**PRODUCTION)["DATABASE_ROUTERS"] == []
    url = "postgres://reader@replica.invalid:5432/memoryhub"
    values = settings_in(**PRODUCTION, REPLICA_DATABASE_URL=url)
    assert values["DATABASE_ROUTERS"] == ["config.routers.ReplicaRouter"]
    assert values["DATABASES"]["replica"]["TEST"]["MIRROR"] == "default"


# --- logs: request ids ---------------------------------------------------------------------


def lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.django_db
def test_request_id_is_echoed_when_sane_and_generated_otherwise(client, json_log):
    sent = client.get("/api/v1/health", HTTP_X_REQUEST_ID="req-42.a:b")
    assert sent["X-Request-ID"] == "req-42.a:b"
    generated = [
        client.get("/api/v1/health")["X-Request-ID"],
        client.get("/api/v1/health", HTTP_X_REQUEST_ID='x" level="CRITICAL')["X-Request-ID"],
        client.get("/api/v1/health", HTTP_X_REQUEST_ID="a" * 129)["X-Request-ID"],
    ]
    for request_id in generated:
        assert len(request_id) == 32
        int(request_id, 16)
    assert len(set(generated)) == 3
    access = [
        entry for entry in lines(json_log.getvalue()) if entry["logger"] == "memoryhub.access"
    ]
    assert [entry["request_id"] for entry in access] == ["req-42.a:b", *generated]
    assert "CRITICAL" not in json_log.getvalue()


@pytest.mark.django_db
def test_a_refused_request_is_logged_with_its_key_prefix_but_not_its_key(tenant, json_log):
    api_key, key = create_api_key(org=tenant.org, can_read=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    response = client.post("/api/v1/domains/support/forget", {"all": True}, format="json")
    assert response.status_code == 403
    [access] = [e for e in lines(json_log.getvalue()) if e["logger"] == "memoryhub.access"]
    assert access["status"] == 403
    assert (access["org"], access["key_prefix"]) == ("acme", api_key.prefix)
    assert key not in json_log.getvalue()


# --- logs: gunicorn, as compose runs it ----------------------------------------------------


def compose_command(service: str) -> list[str]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return list(compose["services"][service]["command"])


@pytest.fixture
def gunicorn(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The compose file's web command on a free port, in production settings."""
    command = compose_command("web")
    port = free_port()
    command[command.index("--bind") + 1] = f"127.0.0.1:{port}"
    command[command.index("--workers") + 1] = "2"
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in {"CELERY_BROKER_URL", "REDIS_URL", "LOG_FORMAT", "DEBUG"}
    }
    environment.update(
        PRODUCTION,
        ALLOWED_HOSTS="127.0.0.1",
        DATABASE_URL=database_url(),
        DJANGO_SETTINGS_MODULE="config.settings",
        SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto",
        PYTHONUNBUFFERED="1",
    )
    # As the image does: the static files are collected before the server starts.
    environment["STATIC_ROOT"] = str(tmp_path / "static")
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=environment,
        check=True,
        timeout=120,
    )
    log = tmp_path / "gunicorn.log"
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", *command],
            cwd=ROOT,
            env=environment,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        if process.poll() is not None:
            raise AssertionError("gunicorn exited:\n" + log.read_text(errors="replace"))
        try:
            return httpx.get(f"{base}/api/v1/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(answers, timeout=60, what="gunicorn to answer")
        yield base, log
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.django_db(transaction=True)
def test_production_serves_the_admin_and_api_docs_static_files(gunicorn):
    base, _ = gunicorn
    https = {"X-Forwarded-Proto": "https"}
    with httpx.Client(headers=https, timeout=30) as client:
        css = client.get(f"{base}/static/admin/css/base.css")
        assert css.status_code == 200
        assert css.headers["Content-Type"].startswith("text/css")
        gzipped = client.get(
            f"{base}/static/admin/css/base.css", headers={"Accept-Encoding": "gzip"}
        )
        assert gzipped.headers.get("Content-Encoding") == "gzip"
        docs = client.get(f"{base}/api/docs/")
        assert docs.status_code == 200
        scripts = re.findall(r'src="(/static/[^"]+\.js)"', docs.text)
        assert scripts, docs.text[:500]
        for script in scripts:
            assert client.get(f"{base}{script}").status_code == 200, script
        assert client.get(f"{base}/static/admin/css/no-such-file.css").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_gunicorn_logs_one_json_line_per_request_without_secrets(tenant, gunicorn):
    base, log = gunicorn
    api_key, key = create_api_key(org=tenant.org, can_read=True, can_write=True, can_forget=True)
    secret = "The vault code of Zebulon Quackenbush is 7741-QUASAR"
    question = "which vault code did Quackenbush choose"
    https = {"X-Forwarded-Proto": "https", "Authorization": f"Api-Key {key}"}
    api = f"{base}/api/v1/domains/support"
    with httpx.Client(headers=https, timeout=30) as client:
        written = client.post(
            f"{api}/records?wait=10",
            json={"items": [{"content": secret, "namespace": "user:quackenbush"}]},
            headers={"X-Request-ID": "write-1"},
        )
        assert written.status_code == 200, written.text
        assert written.headers["X-Request-ID"] == "write-1"
        assert written.headers["Strict-Transport-Security"].startswith("max-age=31536000")
        found = client.post(
            f"{api}/query",
            json={"query": question, "namespaces": ["user:quackenbush"]},
            headers={"X-Request-ID": "query-1"},
        )
        assert found.status_code == 200
        assert found.json()["items"][0]["content"] == secret
        listed = client.get(f"{api}/records", params={"namespace": "user:quackenbush"})
        assert listed.status_code == 200
        assert len(listed.json()["results"]) == 1
        wrong_key = client.get(
            f"{api}/records", headers={"Authorization": f"Api-Key {api_key.prefix}.wrong"}
        )
        assert wrong_key.status_code == 401
    plain_http = httpx.get(f"{base}/api/v1/whoami", timeout=10)
    assert plain_http.status_code == 301
    assert plain_http.headers["Location"].startswith("https://")

    def access_lines() -> list[dict[str, object]]:
        return [e for e in lines(log.read_text()) if e["logger"] == "memoryhub.access"]

    # Every line gunicorn wrote, its own included, is one JSON object (lines() parses all).
    wait_for(lambda: len(access_lines()) >= 6, timeout=10, what="the access lines")
    by_id = {entry["request_id"]: entry for entry in access_lines()}
    for request_id, method, status in (("write-1", "POST", 200), ("query-1", "POST", 200)):
        entry = by_id[request_id]
        assert {"timestamp", "level", "logger", "message", "duration_ms"} <= set(entry)
        assert (entry["method"], entry["status"], entry["level"]) == (method, status, "INFO")
        assert (entry["org"], entry["key_prefix"]) == ("acme", api_key.prefix)
        assert isinstance(entry["duration_ms"], float)
    assert by_id["write-1"]["path"] == "/api/v1/domains/support/records"
    assert by_id[listed.headers["X-Request-ID"]]["path"] == "/api/v1/domains/support/records"
    assert by_id[wrong_key.headers["X-Request-ID"]]["status"] == 401
    assert "key_prefix" not in by_id[wrong_key.headers["X-Request-ID"]]
    assert by_id[plain_http.headers["X-Request-ID"]]["status"] == 301
    everything = log.read_text()
    for forbidden in (secret, "7741-QUASAR", "Quackenbush", "quackenbush", question, key):
        assert forbidden not in everything, forbidden
    assert "Booting worker" in everything  # gunicorn's own lines are JSON too


# --- logs: Celery ----------------------------------------------------------------------------


@pytest.fixture
def private_broker(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of this test's own; this process's tasks go to it instead of running eagerly."""
    server = start_redis(free_port(), tmp_path)
    app = current_app
    saved = (app.conf.task_always_eager, app.conf.broker_url)
    app.conf.task_always_eager, app.conf.broker_url = False, server.url(0)
    app._pool = None
    app.amqp._producer_pool = None
    try:
        yield server
    finally:
        app.conf.task_always_eager, app.conf.broker_url = saved
        app._pool = None
        app.amqp._producer_pool = None
        server.stop()


@pytest.fixture
def worker_log(private_broker: RedisServer, tmp_path: Path) -> Iterator[Path]:
    """The compose file's worker command, in production settings, on the private broker."""
    command = compose_command("worker")
    command[command.index("--concurrency=2")] = "--concurrency=1"
    command += ["-n", f"deploy-{os.getpid()}@%h"]
    environment = {key: value for key, value in os.environ.items() if key not in {"DEBUG"}}
    environment.update(
        PRODUCTION,
        DATABASE_URL=database_url(),
        CELERY_BROKER_URL=private_broker.url(0),
        # The site's settings with task outcomes logged at INFO (they are WARNING-only).
        DJANGO_SETTINGS_MODULE="tests.worker_settings",
        PYTHONUNBUFFERED="1",
    )
    log = tmp_path / "worker.log"
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", *command],
            cwd=ROOT,
            env=environment,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(
            lambda: b"ready." in log.read_bytes() or process.poll() is not None,
            timeout=60,
            what="the worker to be ready",
        )
        assert process.poll() is None, log.read_text(errors="replace")
        yield log
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.django_db(transaction=True)
def test_celery_task_logs_carry_the_task_id(tenant, worker_log):
    result = write.write(tenant.scope, [{"content": "Secret plans of Ermintrude Fandango"}])
    task = index_records.apply_async(args=[result.record_ids], task_id="index-task-0001")

    def task_lines() -> list[dict[str, object]]:
        return [entry for entry in lines(worker_log.read_text()) if entry.get("task_id")]

    wait_for(
        lambda: any(entry["task_id"] == task.id for entry in task_lines()),
        timeout=60,
        what="the task's log line",
    )
    # Every line the worker wrote is one JSON object (lines() parses them all).
    by_task = {entry["task_id"]: entry for entry in task_lines()}
    assert len(by_task) == 2  # the write's own indexing task, and ours
    done = by_task[task.id]
    assert done["logger"] == "celery.app.trace"
    assert done["task_name"] == "memoryhub.tasks.index_records"
    assert "succeeded" in done["message"]
    assert "Ermintrude" not in worker_log.read_text()
    assert MemoryRecord.unscoped.get(pk=result.record_ids[0]).status == "indexed"


@pytest.mark.django_db(transaction=True)
def test_a_task_logs_the_id_of_the_request_that_enqueued_it(tenant, worker_log):
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}", HTTP_X_FORWARDED_PROTO="https")
    response = client.post(
        "/api/v1/domains/support/records",
        {"items": [{"content": "Enqueued by a request"}]},
        format="json",
        HTTP_X_REQUEST_ID="enqueue-42",
        secure=True,
    )
    assert response.status_code == 202, response.content

    def task_lines() -> list[dict[str, object]]:
        return [entry for entry in lines(worker_log.read_text()) if entry.get("task_id")]

    wait_for(
        lambda: any("succeeded" in str(entry["message"]) for entry in task_lines()),
        timeout=60,
        what="the indexing task's log line",
    )
    assert {entry.get("request_id") for entry in task_lines()} == {"enqueue-42"}


# --- read replica --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def replica_alias(django_db_setup) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A ``replica`` alias mirroring the test database, in a read-only session.

    Added before the test cases start, so they can declare it in ``databases``.
    """
    alias = copy.deepcopy(connections["default"].settings_dict)
    alias["TEST"] = {**alias.get("TEST", {}), "MIRROR": "default"}
    # A hot standby refuses writes; so does this session, so a misrouted write fails.
    options = {**alias.get("OPTIONS", {}), "options": "-c default_transaction_read_only=on"}
    alias["OPTIONS"] = options
    connections.settings["replica"] = alias
    try:
        yield "replica"
    finally:
        connections["replica"].close()
        del connections["replica"]
        del connections.settings["replica"]


@pytest.fixture
def replica(replica_alias: str, settings) -> str:  # type: ignore[no-untyped-def]
    settings.DATABASE_ROUTERS = ["config.routers.ReplicaRouter"]
    return replica_alias


ON_REPLICA = pytest.mark.django_db(transaction=True, databases=["default", "replica"])


def memory_queries(alias: str, context: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in context.captured_queries if "memoryhub_memoryrecord" in q["sql"]]


@ON_REPLICA
def test_get_endpoints_read_memory_from_the_replica(tenant, replica):
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    written = client.post(
        "/api/v1/domains/support/records?wait=5",
        {"items": [{"content": "Replicated fact", "namespace": "user:bob"}]},
        format="json",
    )
    assert written.status_code == 200
    record_id = written.json()["records"][0]["id"]
    with (
        CaptureQueriesContext(connections["default"]) as primary,
        CaptureQueriesContext(connections[replica]) as secondary,
    ):
        listed = client.get("/api/v1/domains/support/records?namespace=user:bob")
        one = client.get(f"/api/v1/domains/support/records/{record_id}")
        sources = client.get("/api/v1/domains/support/sources")
    assert listed.json()["results"][0]["content"] == "Replicated fact"
    assert one.json()["id"] == record_id
    assert sources.json()[0]["name"] == "memory"
    assert memory_queries(replica, secondary)
    assert not memory_queries("default", primary)
    # Tenancy and keys (revocation) are read from the primary.
    assert not any("tenants_" in q["sql"] for q in secondary.captured_queries)


@ON_REPLICA
def test_writes_queries_and_forgets_use_the_primary(tenant, replica):
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True, can_forget=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    with CaptureQueriesContext(connections[replica]) as secondary:
        written = client.post(
            "/api/v1/domains/support/records?wait=5",
            {"items": [{"content": "Primary fact", "namespace": "user:eve"}]},
            format="json",
        )
        found = client.post(
            "/api/v1/domains/support/query",
            {"query": "primary fact", "namespaces": ["user:eve"]},
            format="json",
        )
        forgotten = client.post(
            "/api/v1/domains/support/forget", {"namespace": "user:eve"}, format="json"
        )
    assert written.status_code == 200
    assert found.json()["items"][0]["content"] == "Primary fact"
    assert forgotten.json()["deleted"] == 1
    assert secondary.captured_queries == []


@ON_REPLICA
def test_replica_reads_stop_inside_a_transaction_and_after_a_write(tenant, replica):
    records = MemoryRecord.unscoped.all()
    assert records.db == "default"  # not marked read-only
    with replica_reads():
        assert records.db == replica
        assert Domain.objects.all().db == "default"
        with transaction.atomic():
            assert records.db == "default"
        assert records.db == replica
        Observation.unscoped.create(kind="scope.refused", org=tenant.org, count=1)
        assert records.db == "default"
    with replica_reads():
        assert records.db == replica
