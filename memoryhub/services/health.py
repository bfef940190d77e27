"""Health: what a load balancer and an operator ask of a node (``GET /api/v1/health``),
and the probes of an orchestrator (``/livez``, ``/readyz``: :func:`readiness`).

Health is 503 when the database, broker or embedder fails (this node cannot serve);
``degraded`` (200) when only indexing is stuck (no worker seen while records wait):
queries still work, and pulling every web node out of a load balancer because a worker
died would turn a backlog into an outage. Readiness is stricter, and says which check
failed: the deployment is ready when it can take writes and see them indexed.
"""

from __future__ import annotations

from typing import Any

from celery import current_app
from django.db import connection
from django.db.models import Count

from ..conf import memoryhub_settings
from ..embedders.base import is_lexical, is_warm, warm_in_background
from ..models import ImportJob
from . import indexing
from .dispatch import queued

__all__ = ["readiness", "report", "state"]


def report() -> tuple[dict[str, Any], bool]:
    """The health report and whether this node can serve."""
    checks = {
        "database": _database_status(),
        "broker": _broker_status(),
        "embedder": _embedder_status(),
    }
    serving = all(check["ok"] for check in checks.values())
    if checks["database"]["ok"]:
        checks["indexing"] = _indexing_status()
    healthy = serving and checks.get("indexing", {}).get("ok", False)
    return {"status": "ok" if healthy else "degraded", **checks}, serving


def _database_status() -> dict[str, Any]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            row = cursor.fetchone()
    except Exception as exc:
        return {"ok": False, "error": type(exc).__name__}
    return {"ok": row is not None, "vendor": connection.vendor, "pgvector": row and row[0]}


def _broker_status() -> dict[str, Any]:
    if current_app.conf.task_always_eager:
        return {"ok": True, "mode": "eager"}
    try:
        with current_app.connection_for_write() as broker:
            broker.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:
        return {"ok": False, "mode": "broker", "error": type(exc).__name__}
    return {"ok": True, "mode": "broker"}


def _embedder_status() -> dict[str, Any]:
    try:
        embedder = memoryhub_settings.embedder()
    except Exception as exc:
        return {"ok": False, "error": type(exc).__name__}
    # A local model not loaded yet starts loading now (a probe warms a fresh process);
    # ``warm`` says whether queries are answered without waiting for it.
    warm_in_background(embedder)
    status: dict[str, Any] = {
        "ok": True,
        "name": embedder.name,
        "dimensions": embedder.dimensions,
        "lexical": is_lexical(embedder),
        "warm": is_warm(embedder),
    }
    try:
        # A change of embedder in progress: models whose vectors records still carry
        # (they serve queries until re-embedded; the admin home counts them per domain).
        previous = [name for name in indexing.models_in_use() if name != embedder.name]
    except Exception:  # the database check reports a database that does not answer
        return status
    return {**status, "previous_models": previous, "migrating": bool(previous)}


def _indexing_status() -> dict[str, Any]:
    try:
        return indexing.pipeline_status(eager=bool(current_app.conf.task_always_eager))
    except Exception as exc:
        return {"ok": False, "error": type(exc).__name__}


def readiness() -> tuple[dict[str, Any], bool]:
    """Whether this deployment is ready, and each check by name: the database answers
    with pgvector, every migration is applied, the broker answers, a worker has been
    seen within ``WORKER_STALE_AFTER`` (or tasks run in the web process), and the
    embedder is loaded."""
    checks = {"database": _database_status(), "broker": _broker_status()}
    if checks["database"]["ok"]:
        checks["migrations"] = _migrations_status()
        checks["worker"] = _worker_status()
    else:
        checks["migrations"] = checks["worker"] = {"ok": False, "error": "no database"}
    embedder = _embedder_status()
    checks["embedder"] = {**embedder, "ok": embedder["ok"] and embedder.get("warm", False)}
    ready = all(check["ok"] for check in checks.values())
    return {"status": "ready" if ready else "unready", "checks": checks}, ready


#: Set once this process has found every migration applied (they are not unapplied
#: under a running site).
_migrated = False


def _migrations_status() -> dict[str, Any]:
    global _migrated
    if not _migrated:
        from django.db.migrations.executor import MigrationExecutor

        try:
            executor = MigrationExecutor(connection)
            unapplied = executor.migration_plan(executor.loader.graph.leaf_nodes())
        except Exception as exc:
            return {"ok": False, "error": type(exc).__name__}
        if unapplied:
            return {"ok": False, "unapplied": len(unapplied)}
        _migrated = True
    return {"ok": True}


def _worker_status() -> dict[str, Any]:
    if current_app.conf.task_always_eager:
        return {"ok": True, "mode": "eager"}
    try:
        seen = indexing.worker_seen_seconds_ago()
    except Exception as exc:
        return {"ok": False, "error": type(exc).__name__}
    stale_after = memoryhub_settings.WORKER_STALE_AFTER
    return {
        "ok": seen is not None and seen <= stale_after,
        "seen_seconds_ago": None if seen is None else round(seen, 1),
    }


def state() -> dict[str, Any]:
    """The deployment's state as metrics report it: records pending (capped) and the
    oldest one's age in seconds, the indexing messages queued (None: the broker cannot
    tell), import jobs by status."""
    pipeline = indexing.pipeline_status(eager=True)
    counts = dict(
        ImportJob.unscoped.order_by()
        .values_list("status")
        .annotate(n=Count("pk"))
        .values_list("status", "n")
    )
    return {
        "pending": pipeline["pending"],
        "oldest_pending_seconds": pipeline["oldest_pending_seconds"] or 0.0,
        "queued": queued("index_records"),
        "imports": {status: counts.get(status, 0) for status in ImportJob.Status.values},
    }
