"""Logs as production runs them: request ids, JSON lines from gunicorn and Celery, never
secrets; a task carries the id of the request that enqueued it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from celery import current_app
from rest_framework.test import APIClient

from memoryhub.models import MemoryRecord
from memoryhub.services import write
from memoryhub.tasks import index_records
from tests.factories import create_api_key
from tests.programs import ROOT, RedisServer, database_url, free_port, start_private_redis, wait_for
from tests.site_process import PRODUCTION

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
    server = start_private_redis(tmp_path)
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
