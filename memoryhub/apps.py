from typing import Any

from celery.signals import (
    before_task_publish,
    task_received,
    worker_init,
    worker_process_init,
    worker_ready,
    worker_shutdown,
)
from django.apps import AppConfig
from django.core import checks
from django.db import connections
from django.db.models.signals import post_migrate, post_save
from django.utils.translation import gettext_lazy as _

from .checks import check_broker, check_database, check_deploy_settings, check_settings
from .conf import memoryhub_settings
from .log import stamp_task_headers


def ensure_configured_vector_index(using: str = "default", **kwargs: Any) -> None:
    """After migrate: the HNSW index of the configured embedder exists."""
    # The services use the models, so they are imported once the apps are ready.
    from .services.vector_indexes import ensure_vector_index

    if connections[using].vendor != "postgresql":
        return
    embedder = memoryhub_settings.embedder()
    ensure_vector_index(embedder.name, embedder.dimensions)


class MemoryhubConfig(AppConfig):
    name = "memoryhub"
    verbose_name = _("Memory")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import tracing
        from .cache import domain_saved
        from .services.archives import jobs as archive_jobs
        from .signals import records_forgotten
        from .worker import (
            configure_tracing_in_child,
            keep_reconnecting,
            start_heartbeat,
            stop_heartbeat,
            warm_in_pool_child,
        )
        from .worker import task_received as holding_changed

        # An erasure deletes the org's exported archives (they may hold what it erased).
        records_forgotten.connect(archive_jobs.forgotten, weak=False)
        checks.register(check_settings, "memoryhub")
        checks.register(check_deploy_settings, "memoryhub", deploy=True)
        checks.register(check_database, checks.Tags.database)
        checks.register(check_broker, "memoryhub")
        post_migrate.connect(ensure_configured_vector_index, sender=self)
        # A domain's hybrid weight shapes its queries: its cached results go stale.
        post_save.connect(domain_saved, sender="tenants.Domain", weak=False)
        # Task log lines carry the id of the request that enqueued the task.
        before_task_publish.connect(stamp_task_headers, weak=False)
        # A worker writes a heartbeat that the health endpoint and the sweeper read,
        # again as soon as it receives a task (the records it holds).
        worker_ready.connect(start_heartbeat, weak=False)
        task_received.connect(holding_changed, weak=False)
        worker_process_init.connect(warm_in_pool_child, weak=False)
        # ... and reconnects when its broker goes away (memoryhub.worker).
        worker_init.connect(keep_reconnecting, weak=False)
        worker_shutdown.connect(stop_heartbeat, weak=False)
        # Traces, when OpenTelemetry's environment asks for them: in this process
        # (before a web handler loads its middleware), and again in each pool child.
        tracing.configure()
        worker_process_init.connect(configure_tracing_in_child, weak=False)
