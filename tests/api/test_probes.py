"""The orchestrator's probes at the site root: ``/livez`` and ``/readyz``.

What makes ``/readyz`` unready, for real (the broker, a worker, the database going away
and coming back), is in ``tests/workers/test_celery_pipeline.py`` and
``tests/workers/test_faults.py``."""

from __future__ import annotations

import threading

import pytest
from django.test import Client

from memoryhub.conf import memoryhub_settings
from memoryhub.embedders import HashingEmbedder
from memoryhub.services import health
from tests.programs import wait_for

CHECKS = {"database", "migrations", "broker", "worker", "embedder"}


def test_livez_answers_without_a_key_or_the_database():
    # No django_db mark: a query would raise.
    response = Client().get("/livez")
    assert response.status_code == 200
    assert response.json() == {"status": "alive"}
    assert "no-cache" in response["Cache-Control"]


@pytest.mark.django_db
def test_readyz_names_each_check_and_is_ready_when_all_pass():
    response = Client().get("/readyz")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "ready"
    assert set(body["checks"]) == CHECKS
    assert all(check["ok"] for check in body["checks"].values())
    assert "Retry-After" not in response


@pytest.mark.django_db
def test_readyz_is_unready_with_a_migration_unapplied(monkeypatch):
    from django.db.migrations.executor import MigrationExecutor

    monkeypatch.setattr(health, "_migrated", False)
    monkeypatch.setattr(MigrationExecutor, "migration_plan", lambda self, targets: [object()])
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    body = response.json()
    assert body["status"] == "unready"
    assert body["checks"]["migrations"] == {"ok": False, "unapplied": 1}
    assert body["checks"]["database"]["ok"] is True


class Loading(HashingEmbedder):
    """A local model whose load has not finished: nothing wakes it here."""

    warm = False

    def __init__(self, **options: object) -> None:
        super().__init__(**options)
        self.started = threading.Event()
        self.finish = threading.Event()

    def warm_up(self) -> None:
        self.started.set()
        self.finish.wait(timeout=30)
        self.warm = True


@pytest.mark.django_db
def test_readyz_is_unready_while_the_embedder_loads_and_ready_once_it_has(settings):
    settings.MEMORYHUB = {**settings.MEMORYHUB, "EMBEDDER": f"{__name__}.Loading"}
    embedder = memoryhub_settings.embedder()
    try:
        response = Client().get("/readyz")
        assert response.status_code == 503
        assert response.json()["checks"]["embedder"]["ok"] is False
        assert embedder.started.wait(timeout=10)  # the probe started the load
    finally:
        embedder.finish.set()
    wait_for(lambda: Client().get("/readyz").status_code == 200, timeout=10, what="ready")


def test_the_probes_take_no_writes():
    for path in ("/livez", "/readyz"):
        assert Client().post(path).status_code == 405
