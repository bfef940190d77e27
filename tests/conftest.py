"""Shared fixtures: tenants, API clients, and real external services (Redis).

The session uses no server it did not start: ``REDIS_URL`` and ``CELERY_BROKER_URL`` of
the environment (a developer's site or another application) are dropped, for this
process and the processes tests start, so the cache is this process's memory and tasks
run eagerly unless a test points them at a Redis of its own (``tests.programs``). The
database is the test database pytest-django creates (one per xdist worker) on the
server ``DATABASE_URL`` names, else on the embedded PostgreSQL.
"""

from __future__ import annotations

import io
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from memoryhub import log as memoryhub_log
from memoryhub.api.throttling import reset_local_limits
from memoryhub.scope import Scope
from memoryhub.services.query import clear_plans, clear_query_vectors
from tenants.models import Domain

from . import cluster as citus

# Each test run's embedded servers (one per test worker, make run's, a cluster's) size
# themselves for this share of the machine, not all of it: several run at once, and
# beside a benchmark.
os.environ.setdefault("MEMORYHUB_EMBEDDED_MEMORY", "4GB")
from .cancels import cancel  # noqa: F401 (a fixture: the database cancels on purpose)
from .factories import DomainFactory, OrgFactory
from .programs import Worker

#: The cluster's own tests run only in a session on a cluster (``make test`` runs one).
collect_ignore_glob = [] if citus.ENABLED else ["citus/*"]

#: Environment naming servers the tests did not start.
FOREIGN_SERVICES = ("REDIS_URL", "CELERY_BROKER_URL")


def pytest_configure(config: pytest.Config) -> None:
    from celery import current_app
    from django.conf import settings
    from django.test.utils import override_settings

    for name in FOREIGN_SERVICES:
        os.environ.pop(name, None)
    # The settings were read before this file was imported: give them the values an
    # environment without those names produces.
    override_settings(
        CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
        CELERY_TASK_ALWAYS_EAGER=True,
        CELERY_BROKER_URL="memory://localhost/",
        # Files the site keeps (org archives): this session's own directory.
        MEDIA_ROOT=tempfile.mkdtemp(prefix="memoryhub-media-"),
    ).enable()
    current_app.conf.task_always_eager = True
    current_app.conf.broker_url = settings.CELERY_BROKER_URL

    controller = not hasattr(config, "workerinput")
    if citus.ENABLED:
        if controller:
            citus.start(config)
        if citus.CLUSTER_DIR in os.environ:
            citus.point_settings_at_cluster()
    if getattr(config.option, "numprocesses", None) and controller:
        start_embedded_postgres()


def pytest_unconfigure(config: pytest.Config) -> None:
    citus.stop(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not citus.ENABLED:
        return
    reason = os.environ.get("MEMORYHUB_TEST_CITUS_SKIP")
    if reason:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=reason))
        return
    # On a cluster, a test of one server's behaviour is left out (citus.single_node).
    single = [item for item in items if item.get_closest_marker("single_node")]
    if single:
        config.hook.pytest_deselected(items=single)
        items[:] = [item for item in items if not item.get_closest_marker("single_node")]


@pytest.fixture(scope="session")
def django_db_keepdb(request: pytest.FixtureRequest) -> bool:
    """pytest-django's, except on a Citus cluster: there the test database is made on
    every node before Django looks for it (:func:`django_db_modify_db_settings`)."""
    return citus.ENABLED or bool(request.config.getvalue("reuse_db"))


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    if citus.ENABLED and citus.CLUSTER_DIR in os.environ:
        citus.hold_setup_lock()  # released once the database is distributed
        citus.prepare_test_database()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker) -> None:
    """The test database, migrated, and on a Citus cluster distributed."""
    if citus.ENABLED and citus.CLUSTER_DIR in os.environ:
        from django.core.management import call_command

        try:
            with django_db_blocker.unblock():
                call_command("memoryhub_citus", "distribute", f"--shard-count={citus.SHARD_COUNT}")
        finally:
            citus.release_setup_lock()


def start_embedded_postgres() -> None:
    """Start the embedded PostgreSQL once, in the xdist controller, before the workers:
    they then find it running instead of racing to start it. The controller holds it
    until the session ends."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"] != "memoryhub.contrib.embedded_postgres":
        return
    from memoryhub.contrib.embedded_postgres import server as embedded

    embedded.get_server(Path(database["DATA_DIR"]))


@dataclass
class Tenant:
    """An org with one domain, and its scope."""

    domain: Domain

    @property
    def org(self):
        return self.domain.org

    @property
    def scope(self) -> Scope:
        return Scope.for_domain(self.domain)


@pytest.fixture(autouse=True)
def _clear_cache() -> Iterator[None]:
    cache.clear()
    reset_local_limits()  # the throttles' counts, kept beside a local-memory cache
    clear_plans()  # compiled per domain generation, which restarts with the cache
    clear_query_vectors()  # a test may configure an embedder of the same name
    yield
    cache.clear()


@pytest.fixture
def tenant(db: None) -> Tenant:
    return Tenant(DomainFactory(org=OrgFactory(slug="acme"), slug="support"))


@pytest.fixture
def other_tenant(db: None) -> Tenant:
    return Tenant(DomainFactory(org=OrgFactory(slug="globex"), slug="support"))


@pytest.fixture
def acme_user(tenant):
    """A staff member of acme only (the default role: an operator)."""
    from .factories import MembershipFactory

    return MembershipFactory(org=tenant.org, user__is_staff=True).user


@pytest.fixture
def operator(client, acme_user):
    """The test client, signed in as ``acme_user`` (modules may define their own)."""
    client.force_login(acme_user)
    return client


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    """Run ``fn(*args)`` and then its on-commit callbacks, as a real commit would.

    Tests run inside a transaction that never commits; this executes what the commit
    would have (indexing in eager mode, cache generation bumps).
    """

    def run(fn, *args, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return fn(*args, **kwargs)

    return run


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """Every log record of this process during the test, as the site's JSON lines (the
    real formatter and context filter)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(memoryhub_log.JsonFormatter())
    handler.addFilter(memoryhub_log.RequestContextFilter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield stream
    root.removeHandler(handler)
    root.setLevel(level)


def without_receipt(body: dict) -> dict:
    """A forget response without its receipt id (a new UUID each time)."""
    assert "receipt" in body
    return {key: value for key, value in body.items() if key != "receipt"}


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """Celery worker processes a test starts (``tests.programs.start_worker``), stopped
    after it."""
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()
