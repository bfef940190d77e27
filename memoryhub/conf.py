"""The ``MEMORYHUB`` settings dict: defaults, lazy access, and the system checks on it.

Read settings through ``memoryhub_settings`` (``memoryhub_settings.MAX_K``); values are
read lazily and re-read when a test changes ``settings.MEMORYHUB``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

if TYPE_CHECKING:
    from .embedders import Embedder

DEFAULTS: dict[str, Any] = {
    # Import path of the embedder class and the keyword options it is built with.
    "EMBEDDER": "memoryhub.embedders.HashingEmbedder",
    "EMBEDDER_OPTIONS": {},
    # Embedders records may still carry vectors of, after a change of EMBEDDER: each a
    # {"EMBEDDER": path, "EMBEDDER_OPTIONS": {...}}. Queries embed the query with each
    # model still present in the scope, so old vectors serve until re-embedding is done
    # (the default HashingEmbedder family is recognised by its name without this).
    "PREVIOUS_EMBEDDERS": [],
    # Record history: previous states kept per record (the oldest dropped); 0 keeps none.
    "HISTORY_VERSIONS": 50,
    # Consolidation of episodic turns into semantic facts: the extractor (an import path
    # to a class or factory; None: from MEMORYHUB_LLM_* in the environment, else the
    # built-in one), turns per run, and similar facts shown to the extractor.
    "CONSOLIDATION_EXTRACTOR": None,
    "CONSOLIDATION_BATCH": 50,
    "CONSOLIDATION_FACTS": 20,
    # Bounds on one write request.
    "MAX_WRITE_ITEMS": 100,
    "MAX_CONTENT_LENGTH": 20_000,
    "MAX_METADATA_BYTES": 16_384,
    "MAX_TAGS": 32,
    "MAX_TAG_LENGTH": 64,
    "MAX_KEY_LENGTH": 255,
    "MAX_NAMESPACE_LENGTH": 200,
    # Bounds on one query.
    "DEFAULT_K": 5,
    "MAX_K": 100,
    "MAX_QUERY_LENGTH": 4_000,
    # Vector search scans filtered scopes up to this many rows exactly; larger ones go
    # through the model's HNSW index with iterative scans.
    "EXACT_SCAN_THRESHOLD": 2_000,
    "HNSW_EF_SEARCH": 200,
    "HNSW_MAX_SCAN_TUPLES": 40_000,
    # A domain with at least this many records gets its own (partial) HNSW index, built
    # by the sweeper; its queries search that index with the same effort per record as
    # the shared one (0 disables).
    "TENANT_INDEX_MIN_RECORDS": 10_000,
    # Seconds a query result stays in the cache (0 disables the cache).
    "CACHE_ALIAS": "default",
    "CACHE_TTL": 60,
    # Indexing: records embedded per task, and retries of a failing embedder.
    "INDEX_BATCH_SIZE": 64,
    # Bulk storage: a write creating at least this many records copies them in with one
    # binary COPY, and an indexing batch of at least this many records stores its vectors
    # the same way, outside the shared HNSW index where an exact scan or a bulk-built
    # index serves them (services/bulk.py); smaller ones (an agent's turn) go row by row.
    "BULK_MIN_RECORDS": 10,
    # Records embedded per task for a bulk write, an import or a re-embed.
    "BULK_INDEX_BATCH_SIZE": 500,
    # A domain's delta (vectors stored in bulk that its own HNSW index does not hold yet,
    # scanned exactly by its vector queries until the index is built again) stays within
    # this many records; past it, bulk-stored vectors go into the domain's own index row
    # by row. Larger: huge loads build in bulk, while their domain's queries scan more.
    "BULK_DELTA_MAX": 20_000,
    "INDEX_MAX_ATTEMPTS": 5,
    # The sweeper re-enqueues records pending for longer than this many seconds.
    "SWEEP_PENDING_AFTER": 300,
    "SWEEP_INTERVAL": 60,
    # Observations older than this many days are purged by the sweeper.
    "OBSERVATION_RETENTION_DAYS": 90,
    # Upper bound of ``?wait=`` on writes, in seconds.
    "MAX_WAIT_SECONDS": 30,
    # Requests per API key (DRF rate syntax); None disables throttling.
    "THROTTLE_RATE": "1200/min",
    # Namespaces of data subjects: an agent's forget of one of these reaches read-only
    # knowledge bases too (GDPR erasure); None: every non-shared namespace.
    "SUBJECT_NAMESPACE_PREFIXES": ["user:", "session:"],
    # The key of the HMAC that receipts keep instead of a namespace or key (None: the
    # site's SECRET_KEY, which then cannot be rotated without orphaning old receipts).
    "ERASURE_RECEIPT_KEY": None,
    # Seconds after an erasure within which the erased tables are vacuumed and analysed
    # (dead tuples and planner samples of erased rows go); None leaves it to autovacuum.
    "VACUUM_AFTER_ERASURE": 30,
    # Failed API-key authentications (401s) per client address before it is refused
    # with 429 (DRF rate syntax); None disables the limit.
    "AUTH_FAILURE_RATE": "30/min",
    # Health reports "degraded" when records have waited longer than this many seconds
    # and no worker has sent a heartbeat for as long (broker mode only).
    "WORKER_STALE_AFTER": 60,
    # How often a worker writes its heartbeat, in seconds.
    "WORKER_HEARTBEAT_INTERVAL": 15,
    # Largest JSON body the API reads (bytes); larger ones get a JSON 413.
    "MAX_BODY_BYTES": 4 * 1024 * 1024,
    # The namespace of a host user's memory (memoryhub.namespaces.for_user), formatted
    # with the user's pk and username.
    "USER_NAMESPACE": "user:{pk}",
    # Authentication classes (dotted paths) the API accepts besides API keys and staff
    # sessions; the host's REST_FRAMEWORK defaults never apply to memoryhub's API.
    "API_AUTHENTICATION_CLASSES": [],
    # Largest file the admin imports (bytes); it is streamed, never held in memory.
    "IMPORT_MAX_BYTES": 1024**3,
}

INTEGER_SETTINGS = {
    "MAX_WRITE_ITEMS": 1,
    "MAX_CONTENT_LENGTH": 1,
    "MAX_METADATA_BYTES": 2,
    "MAX_TAGS": 0,
    "MAX_TAG_LENGTH": 1,
    "MAX_KEY_LENGTH": 1,
    "MAX_NAMESPACE_LENGTH": 1,
    "DEFAULT_K": 1,
    "MAX_K": 1,
    "MAX_QUERY_LENGTH": 1,
    "CACHE_TTL": 0,
    "EXACT_SCAN_THRESHOLD": 0,
    "HNSW_EF_SEARCH": 1,
    "HNSW_MAX_SCAN_TUPLES": 1,
    "TENANT_INDEX_MIN_RECORDS": 0,
    "INDEX_BATCH_SIZE": 1,
    "BULK_MIN_RECORDS": 1,
    "BULK_INDEX_BATCH_SIZE": 1,
    "BULK_DELTA_MAX": 0,
    "INDEX_MAX_ATTEMPTS": 1,
    "SWEEP_PENDING_AFTER": 1,
    "SWEEP_INTERVAL": 1,
    "HISTORY_VERSIONS": 0,
    "CONSOLIDATION_BATCH": 1,
    "CONSOLIDATION_FACTS": 1,
    "OBSERVATION_RETENTION_DAYS": 1,
    "MAX_WAIT_SECONDS": 0,
    "MAX_BODY_BYTES": 1024,
    "IMPORT_MAX_BYTES": 1,
    "WORKER_STALE_AFTER": 1,
    "WORKER_HEARTBEAT_INTERVAL": 1,
}


_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(rate: str | None) -> tuple[int, int] | None:
    """DRF's rate syntax: ``"1200/min"`` → ``(1200, 60)``; ``None`` disables.

    Raises ``ValueError`` for anything else (the system check reports it at startup).
    """
    if rate is None:
        return None
    if not isinstance(rate, str):
        raise ValueError(f"{rate!r} is not a rate")
    count, _, period = rate.partition("/")
    seconds = _PERIODS.get(period.strip()[:1])
    if seconds is None or not count.strip().isdigit() or int(count) < 1:
        raise ValueError(f"{rate!r} is not a rate like '1200/min'")
    return int(count), seconds


class MemoryhubSettings:
    """Attribute access to ``settings.MEMORYHUB`` merged over ``DEFAULTS``."""

    def __init__(self) -> None:
        self._embedder: Embedder | None = None
        self._previous: dict[str, Embedder] | None = None

    @property
    def user_settings(self) -> dict[str, Any]:
        return getattr(settings, "MEMORYHUB", None) or {}

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"Invalid memoryhub setting: {name!r}")
        return self.user_settings.get(name, DEFAULTS[name])

    def embedder(self) -> Embedder:
        """The configured embedder, built once and reused."""
        if self._embedder is None:
            embedder_class = import_string(self.EMBEDDER)
            self._embedder = embedder_class(**self.EMBEDDER_OPTIONS)
        return self._embedder

    def embedder_for(self, model_name: str) -> Embedder | None:
        """The embedder whose vectors are stored under ``model_name``: the configured one,
        one of ``PREVIOUS_EMBEDDERS``, or a default-option ``HashingEmbedder`` recognised
        by its name; None when none is known (those vectors cannot serve queries)."""
        current = self.embedder()
        if model_name == current.name:
            return current
        if self._previous is None:
            previous: dict[str, Embedder] = {}
            for entry in self.PREVIOUS_EMBEDDERS:
                embedder = import_string(entry["EMBEDDER"])(**entry.get("EMBEDDER_OPTIONS", {}))
                previous[embedder.name] = embedder
            self._previous = previous
        if model_name in self._previous:
            return self._previous[model_name]
        from .embedders.hashing import HashingEmbedder

        return HashingEmbedder.from_name(model_name)

    def reload(self) -> None:
        self._embedder = None
        self._previous = None


memoryhub_settings = MemoryhubSettings()


def reload_settings(*, setting: str, **kwargs: Any) -> None:
    if setting == "MEMORYHUB":
        memoryhub_settings.reload()


setting_changed.connect(reload_settings)


def check_settings(**kwargs: Any) -> list[CheckMessage]:
    """System checks ``memoryhub.E001``–``E004`` and ``W001`` on ``settings.MEMORYHUB``."""
    messages: list[CheckMessage] = []
    user_settings = getattr(settings, "MEMORYHUB", None) or {}
    if not isinstance(user_settings, dict):
        return [Error("settings.MEMORYHUB must be a dict.", id="memoryhub.E001")]
    for name in sorted(set(user_settings) - set(DEFAULTS)):
        messages.append(
            Warning(
                f"Unknown memoryhub setting MEMORYHUB[{name!r}] is ignored.",
                hint=f"Known settings: {', '.join(sorted(DEFAULTS))}.",
                id="memoryhub.W001",
            )
        )
    for name, minimum in INTEGER_SETTINGS.items():
        value = memoryhub_settings.user_settings.get(name, DEFAULTS[name])
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            messages.append(
                Error(
                    f"MEMORYHUB[{name!r}] must be an integer >= {minimum}, not {value!r}.",
                    id="memoryhub.E002",
                )
            )
    for name in ("THROTTLE_RATE", "AUTH_FAILURE_RATE"):
        try:
            parse_rate(memoryhub_settings.user_settings.get(name, DEFAULTS[name]))
        except ValueError as exc:
            messages.append(
                Error(
                    f"MEMORYHUB[{name!r}]: {exc}.",
                    hint="A number of requests per s, min, hour or day ('1200/min'), or None.",
                    id="memoryhub.E005",
                )
            )
    vacuum = memoryhub_settings.VACUUM_AFTER_ERASURE
    if vacuum is not None and (
        isinstance(vacuum, bool) or not isinstance(vacuum, int) or vacuum < 0
    ):
        messages.append(
            Error(
                f"MEMORYHUB['VACUUM_AFTER_ERASURE'] must be seconds >= 0 or None, not {vacuum!r}.",
                id="memoryhub.E008",
            )
        )
    prefixes = memoryhub_settings.user_settings.get(
        "SUBJECT_NAMESPACE_PREFIXES", DEFAULTS["SUBJECT_NAMESPACE_PREFIXES"]
    )
    if prefixes is not None and (
        isinstance(prefixes, str)
        or not isinstance(prefixes, list | tuple)
        or not all(isinstance(prefix, str) and prefix for prefix in prefixes)
    ):
        messages.append(
            Error(
                "MEMORYHUB['SUBJECT_NAMESPACE_PREFIXES'] must be a list of non-empty "
                f"strings or None, not {prefixes!r}.",
                id="memoryhub.E006",
            )
        )
    receipt_key = memoryhub_settings.user_settings.get("ERASURE_RECEIPT_KEY")
    if receipt_key is not None and (not isinstance(receipt_key, str) or len(receipt_key) < 32):
        messages.append(
            Error(
                "MEMORYHUB['ERASURE_RECEIPT_KEY'] must be a string of at least 32 characters.",
                id="memoryhub.E007",
            )
        )
    if memoryhub_settings.DEFAULT_K > memoryhub_settings.MAX_K:
        messages.append(Error("MEMORYHUB['DEFAULT_K'] exceeds MAX_K.", id="memoryhub.E002"))
    messages.extend(_check_columns())
    messages.extend(_check_cache_alias())
    messages.extend(_check_embedder())
    return messages


def _check_columns() -> list[CheckMessage]:
    """``memoryhub.E012``: a length setting larger than the column that stores it would
    accept an item the database then refuses (a 500 mid-write instead of a 400)."""
    from .models import MemoryRecord

    fields = MemoryRecord._meta
    columns = {
        "MAX_KEY_LENGTH": fields.get_field("key").max_length,
        "MAX_NAMESPACE_LENGTH": fields.get_field("namespace").max_length,
        "MAX_TAG_LENGTH": fields.get_field("tags").base_field.max_length,
    }
    messages: list[CheckMessage] = []
    for name, width in columns.items():
        value = memoryhub_settings.user_settings.get(name, DEFAULTS[name])
        if isinstance(value, int) and width is not None and value > width:
            messages.append(
                Error(
                    f"MEMORYHUB[{name!r}] = {value} exceeds its column ({width} characters).",
                    hint=f"Use at most {width}.",
                    id="memoryhub.E012",
                )
            )
    return messages


def _check_cache_alias() -> list[CheckMessage]:
    """``memoryhub.E013``: the query cache and the domain generations live in the cache
    named by ``CACHE_ALIAS``; a name ``CACHES`` lacks fails every query at run time."""
    alias = memoryhub_settings.CACHE_ALIAS
    caches = getattr(settings, "CACHES", None) or {"default": {}}
    if alias not in caches:
        return [
            Error(
                f"MEMORYHUB['CACHE_ALIAS'] = {alias!r} is not in CACHES ({', '.join(caches)}).",
                hint="Name one of settings.CACHES (a shared one, e.g. Redis, in production).",
                id="memoryhub.E013",
            )
        ]
    return []


def check_deploy_settings(**kwargs: Any) -> list[CheckMessage]:
    """``manage.py check --deploy``: ``memoryhub.W002`` without a receipt key."""
    if memoryhub_settings.user_settings.get("ERASURE_RECEIPT_KEY") is not None:
        return []
    return [
        Warning(
            "MEMORYHUB['ERASURE_RECEIPT_KEY'] is not set: erasure receipts are keyed with "
            "SECRET_KEY, and rotating it makes old receipts unverifiable.",
            hint="Set it to a long random string and keep it (MEMORYHUB_ERASURE_RECEIPT_KEY).",
            id="memoryhub.W002",
        )
    ]


def check_database(databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``memoryhub.E009``/``E010`` (database checks: ``migrate`` runs them first): the
    database must be PostgreSQL with the ``vector`` extension available, which SQLite
    and a PostgreSQL without pgvector are not (the first migration would fail with a
    syntax error half-way)."""
    from django.db import connections

    messages: list[CheckMessage] = []
    for alias in databases or []:
        connection = connections[alias]
        if connection.vendor != "postgresql":
            messages.append(
                Error(
                    f"memoryhub needs PostgreSQL with pgvector; database {alias!r} is "
                    f"{connection.vendor}.",
                    hint="Point DATABASES at PostgreSQL with the vector extension "
                    "(pgvector 0.8; e.g. the pgvector/pgvector Docker image).",
                    id="memoryhub.E009",
                )
            )
            continue
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
                available = cursor.fetchone() is not None
        except Exception:  # unreachable: Django's own checks report the connection
            continue
        if not available:
            messages.append(
                Error(
                    f"The PostgreSQL of database {alias!r} lacks the vector extension.",
                    hint="Install pgvector on the server (e.g. the postgresql-NN-pgvector "
                    "package, or the pgvector/pgvector Docker image).",
                    id="memoryhub.E010",
                )
            )
    return messages


def check_broker(**kwargs: Any) -> list[CheckMessage]:
    """``memoryhub.W003``: tasks are not eager and no broker is configured, so Celery
    would publish to its default, ``amqp://localhost``, whatever answers there."""
    from celery import current_app
    from django.conf import settings

    conf = current_app.conf
    # The Celery app, or the Django settings it is configured from (namespace CELERY),
    # when the app is not imported at check time.
    eager = conf.task_always_eager or getattr(settings, "CELERY_TASK_ALWAYS_EAGER", False)
    broker = conf.broker_url or conf.broker_write_url or getattr(settings, "CELERY_BROKER_URL", "")
    if eager:
        return []
    if broker:
        return _check_beat(conf, settings)
    return [
        Warning(
            "Celery has no broker configured and tasks are not eager: memoryhub's "
            "indexing and import tasks would go to amqp://localhost.",
            hint="Set CELERY_BROKER_URL (with your Celery app configured from Django "
            "settings), or CELERY_TASK_ALWAYS_EAGER = True to run tasks in-process.",
            id="memoryhub.W003",
        )
    ]


def _check_beat(conf: Any, settings: Any) -> list[CheckMessage]:
    """``memoryhub.W004``: with a broker, the sweep (re-sending lost work, purging expired
    memory) must be on beat's schedule; ``SWEEP_INTERVAL`` says how often."""
    from .schedule import SWEEP_TASK, beat_schedule

    schedule = dict(conf.beat_schedule or {}) or dict(
        getattr(settings, "CELERY_BEAT_SCHEDULE", None) or {}
    )
    entries = [entry for entry in schedule.values() if entry.get("task") == SWEEP_TASK]
    wanted = memoryhub_settings.SWEEP_INTERVAL
    if not entries:
        return [
            Warning(
                "memoryhub's sweep is not on Celery beat's schedule: work a worker lost "
                "is never sent again and expired memory is never purged.",
                hint="CELERY_BEAT_SCHEDULE = {**beat_schedule(MEMORYHUB)} "
                "(from memoryhub.schedule import beat_schedule), and run beat.",
                id="memoryhub.W004",
            )
        ]
    expected = beat_schedule({"SWEEP_INTERVAL": wanted})["memoryhub-sweep"]["schedule"]
    if all(entry.get("schedule") != expected for entry in entries):
        return [
            Warning(
                f"memoryhub's sweep is scheduled, but not every SWEEP_INTERVAL ({wanted} s).",
                hint="Build CELERY_BEAT_SCHEDULE with memoryhub.schedule.beat_schedule(MEMORYHUB).",
                id="memoryhub.W004",
            )
        ]
    return []


def _check_embedder() -> list[CheckMessage]:
    from .embedders import Embedder

    path = memoryhub_settings.EMBEDDER
    options = memoryhub_settings.EMBEDDER_OPTIONS
    if not isinstance(options, dict):
        return [Error("MEMORYHUB['EMBEDDER_OPTIONS'] must be a dict.", id="memoryhub.E003")]
    try:
        embedder_class = import_string(path)
    except ImportError as exc:
        return [
            Error(
                f"MEMORYHUB['EMBEDDER'] = {path!r} cannot be imported: {exc}",
                hint="Use e.g. 'memoryhub.embedders.HashingEmbedder'.",
                id="memoryhub.E003",
            )
        ]
    try:
        embedder = embedder_class(**options)
    except Exception as exc:
        return [
            Error(
                f"The embedder {path!r} cannot be built with {options!r}: {exc}",
                id="memoryhub.E004",
            )
        ]
    if not isinstance(embedder, Embedder):
        return [
            Error(
                f"{path!r} is not an Embedder (name, dimensions, embed_documents, embed_query).",
                id="memoryhub.E004",
            )
        ]
    dimensions = embedder.dimensions
    if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
        return [Error(f"{path!r} reports dimensions={dimensions!r}.", id="memoryhub.E004")]
    return _check_previous_embedders()


def _check_previous_embedders() -> list[CheckMessage]:
    entries = memoryhub_settings.PREVIOUS_EMBEDDERS
    hint = 'A list like [{"EMBEDDER": "memoryhub.embedders.HashingEmbedder"}].'
    if not isinstance(entries, list | tuple):
        message = "MEMORYHUB['PREVIOUS_EMBEDDERS'] must be a list."
        return [Error(message, hint=hint, id="memoryhub.E011")]
    errors: list[CheckMessage] = []
    for index, entry in enumerate(entries):
        where = f"MEMORYHUB['PREVIOUS_EMBEDDERS'][{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("EMBEDDER"), str):
            message = f"{where} must be a dict with an EMBEDDER path."
            errors.append(Error(message, hint=hint, id="memoryhub.E011"))
            continue
        try:
            import_string(entry["EMBEDDER"])(**entry.get("EMBEDDER_OPTIONS", {}))
        except Exception as exc:
            errors.append(Error(f"{where} cannot be built: {exc}", id="memoryhub.E011"))
    return errors
