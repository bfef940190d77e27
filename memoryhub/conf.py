"""The ``MEMORYHUB`` settings dict: defaults, lazy access, and the system checks on it.

Read settings through ``memoryhub_settings`` (``memoryhub_settings.MAX_K``); values are
read lazily and re-read when a test changes ``settings.MEMORYHUB``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

if TYPE_CHECKING:
    from .embedders import Embedder
    from .rerankers import DocumentReranker

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
    # Reranking the fused candidates of a query with a model (a cross-encoder): an
    # import path to a class or factory building a DocumentReranker and its keyword
    # options (None: no reranking, the fused order), and how many of the best fused
    # candidates it reorders (1..MAX_RERANK_CANDIDATES).
    "RERANKER": None,
    "RERANKER_OPTIONS": {},
    "RERANK_CANDIDATES": 50,
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
    # The most neighbouring turns a query's context_turns may ask for on each side of a
    # hit (turns of one session: metadata["session"]).
    "MAX_CONTEXT_TURNS": 3,
    # Recency boost: a record's score is multiplied by 0.5 ** (age / half-life), its age
    # counted from when it occurred; seconds (or a timedelta), None: off. A query's
    # recency_half_life overrides it.
    "RECENCY_HALF_LIFE": None,
    # One line of the grounding block per item (str.format over source, content, id, key,
    # kind, namespace, score, occurred, created), e.g. "[{source} {occurred:%Y-%m-%d}]
    # {content}".
    "GROUNDING_FORMAT": "[{source}] {content}",
    # Vector search scans filtered scopes up to this many rows exactly; larger ones go
    # through the model's HNSW index with iterative scans.
    "EXACT_SCAN_THRESHOLD": 2_000,
    # Metadata keys that vector queries filter on (their `where`): each gets a btree
    # index of (domain, metadata -> key), built by the sweeper, and a query filtered on
    # one is scanned exactly up to five times EXACT_SCAN_THRESHOLD rows (recall 1.0)
    # instead of searching the HNSW graph for neighbours the filter throws away.
    "INDEXED_METADATA_KEYS": [],
    "HNSW_EF_SEARCH": 200,
    "HNSW_MAX_SCAN_TUPLES": 40_000,
    # Hybrid search: the vector leg's share of the fused score (the keyword leg has the
    # rest), from 0 to 1; None: the embedder's own default (``hybrid_vector_weight``:
    # 0.3 for the hashing embedder, 0.4 for real models). A domain's own weight (admin)
    # takes precedence.
    "HYBRID_VECTOR_WEIGHT": None,
    # A domain with at least this many records gets its own (partial) HNSW index, built
    # by the sweeper; its queries search that index with the same effort per record as
    # the shared one (0 disables).
    "TENANT_INDEX_MIN_RECORDS": 10_000,
    # A domain with at least this many records has its words counted by the sweeper
    # (services/word_statistics.py): its keyword leg then ranks the records holding a
    # query's rarest words, about KEYWORD_RANK_BUDGET of them and never more than ten
    # times that, instead of every record holding any of its words (0 disables).
    "KEYWORD_STATISTICS_MIN_RECORDS": 5_000,
    "KEYWORD_RANK_BUDGET": 200,
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
    # scanned exactly by its vector queries until the index is built again, which it is
    # once the delta outgrows the index) stays within this many records, or twice what
    # its index covers if that is more; past it (a load outrunning the rebuilds),
    # bulk-stored vectors go into the domain's own index row by row.
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
    "MAX_CONTEXT_TURNS": 0,
    "CACHE_TTL": 0,
    "EXACT_SCAN_THRESHOLD": 0,
    "HNSW_EF_SEARCH": 1,
    "HNSW_MAX_SCAN_TUPLES": 1,
    "TENANT_INDEX_MIN_RECORDS": 0,
    "KEYWORD_STATISTICS_MIN_RECORDS": 0,
    "KEYWORD_RANK_BUDGET": 1,
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
    "RERANK_CANDIDATES": 1,
}

#: The most candidates one query sends to the reranker: each is a document in the
#: request body and a cross-encoder pass, paid by every query.
MAX_RERANK_CANDIDATES = 1_000


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


#: The longest recency half-life, a query's or the setting's: a century.
MAX_HALF_LIFE_SECONDS = 100 * 365 * 86400


def half_life_seconds(value: Any) -> float | None:
    """A recency half-life in seconds: a number of seconds or a ``timedelta``, up to
    ``MAX_HALF_LIFE_SECONDS``; ``None`` and ``0`` are no boost. Raises ``ValueError``
    for anything else."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if value is None or (not isinstance(value, bool) and value == 0):
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= MAX_HALF_LIFE_SECONDS
    ):
        raise ValueError(
            f"a half-life is a number of seconds from 0 (off) to {MAX_HALF_LIFE_SECONDS}"
            f" or a timedelta, not {value!r}"
        )
    return float(value)


class MemoryhubSettings:
    """Attribute access to ``settings.MEMORYHUB`` merged over ``DEFAULTS``."""

    def __init__(self) -> None:
        self._embedder: Embedder | None = None
        self._previous: dict[str, Embedder] | None = None
        self._reranker: DocumentReranker | None = None

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

    def recency_half_life(self) -> float | None:
        """``RECENCY_HALF_LIFE`` in seconds (None: no recency boost)."""
        return half_life_seconds(self.RECENCY_HALF_LIFE)

    def reranker(self) -> DocumentReranker | None:
        """The configured reranker, built once and reused; None when ``RERANKER`` is."""
        if self.RERANKER is None:
            return None
        if self._reranker is None:
            self._reranker = import_string(self.RERANKER)(**self.RERANKER_OPTIONS)
        return self._reranker

    def reload(self) -> None:
        self._embedder = None
        self._previous = None
        self._reranker = None


memoryhub_settings = MemoryhubSettings()


def reload_settings(*, setting: str, **kwargs: Any) -> None:
    if setting == "MEMORYHUB":
        memoryhub_settings.reload()


setting_changed.connect(reload_settings)


def check_settings(**kwargs: Any) -> list[CheckMessage]:
    """System checks on ``settings.MEMORYHUB``: its shape (``memoryhub.E001``, ``W001``),
    its numbers and rates, its erasure settings, the columns and cache it names, and the
    embedder."""
    user_settings = getattr(settings, "MEMORYHUB", None) or {}
    if not isinstance(user_settings, dict):
        return [Error("settings.MEMORYHUB must be a dict.", id="memoryhub.E001")]
    messages: list[CheckMessage] = [
        Warning(
            f"Unknown memoryhub setting MEMORYHUB[{name!r}] is ignored.",
            hint=f"Known settings: {', '.join(sorted(DEFAULTS))}.",
            id="memoryhub.W001",
        )
        for name in sorted(set(user_settings) - set(DEFAULTS))
    ]
    messages.extend(_check_numbers())
    messages.extend(_check_erasure_settings())
    messages.extend(_check_search())
    messages.extend(_check_columns())
    messages.extend(_check_cache_alias())
    messages.extend(_check_embedder())
    messages.extend(_check_reranker())
    messages.extend(_check_time_aware())
    return messages


def _check_search() -> list[CheckMessage]:
    """``memoryhub.E002`` (``DEFAULT_K`` above ``MAX_K``, too many context turns or rerank
    candidates),
    ``E015`` (``HYBRID_VECTOR_WEIGHT`` neither a number from 0 to 1 nor None)."""
    messages: list[CheckMessage] = []
    if memoryhub_settings.DEFAULT_K > memoryhub_settings.MAX_K:
        messages.append(Error("MEMORYHUB['DEFAULT_K'] exceeds MAX_K.", id="memoryhub.E002"))
    turns = memoryhub_settings.MAX_CONTEXT_TURNS
    if isinstance(turns, int) and turns > MAX_CONTEXT_TURNS_LIMIT:
        messages.append(
            Error(
                f"MEMORYHUB['MAX_CONTEXT_TURNS'] = {turns} is more than "
                f"{MAX_CONTEXT_TURNS_LIMIT} (each turn is a row read per hit and side).",
                id="memoryhub.E002",
            )
        )
    candidates = memoryhub_settings.RERANK_CANDIDATES
    if isinstance(candidates, int) and candidates > MAX_RERANK_CANDIDATES:
        messages.append(
            Error(
                f"MEMORYHUB['RERANK_CANDIDATES'] = {candidates} exceeds "
                f"{MAX_RERANK_CANDIDATES}: every query would send that many documents.",
                id="memoryhub.E002",
            )
        )
    weight = memoryhub_settings.HYBRID_VECTOR_WEIGHT
    if weight is not None and (
        isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight <= 1
    ):
        messages.append(
            Error(
                f"MEMORYHUB['HYBRID_VECTOR_WEIGHT'] must be a number from 0 to 1 or None,"
                f" not {weight!r}.",
                id="memoryhub.E015",
            )
        )
    return messages


def _check_numbers() -> list[CheckMessage]:
    """``memoryhub.E002`` (an integer below its minimum), ``E005`` (a rate that does not
    parse), ``E008`` (``VACUUM_AFTER_ERASURE`` neither seconds nor None)."""
    messages: list[CheckMessage] = []
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
    return messages


def _check_erasure_settings() -> list[CheckMessage]:
    """``memoryhub.E006`` (``SUBJECT_NAMESPACE_PREFIXES`` not a list of non-empty strings),
    ``E007`` (an ``ERASURE_RECEIPT_KEY`` too short to key the receipts' hashes) and
    ``E018`` (``INDEXED_METADATA_KEYS`` not a short list of metadata keys)."""
    messages: list[CheckMessage] = []
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
    from .filters import MAX_KEY_LENGTH

    keys = memoryhub_settings.user_settings.get("INDEXED_METADATA_KEYS", [])
    if (
        isinstance(keys, str)
        or not isinstance(keys, list | tuple)
        or len(keys) > MAX_INDEXED_METADATA_KEYS
        or not all(
            isinstance(key, str)
            and 0 < len(key) <= MAX_KEY_LENGTH
            and "\x00" not in key
            and not key.startswith("$")
            for key in keys
        )
    ):
        messages.append(
            Error(
                f"MEMORYHUB['INDEXED_METADATA_KEYS'] must be a list of at most"
                f" {MAX_INDEXED_METADATA_KEYS} metadata keys (strings of 1 to {MAX_KEY_LENGTH}"
                f" characters, no NUL, not starting with $), not {keys!r}.",
                hint="Each key is an index on the records table, paid by every write.",
                id="memoryhub.E018",
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
    return messages


#: The most metadata keys ``INDEXED_METADATA_KEYS`` may name (an index each).
MAX_INDEXED_METADATA_KEYS = 16

#: The most ``MAX_CONTEXT_TURNS`` may be: a query then reads at most
#: ``MAX_K × 2 × MAX_CONTEXT_TURNS`` turns.
MAX_CONTEXT_TURNS_LIMIT = 20


def _check_time_aware() -> list[CheckMessage]:
    """``memoryhub.E016`` for a recency half-life that is not seconds or a timedelta,
    ``memoryhub.E017`` for a grounding format that cannot render an item."""
    from .items import grounding_fields

    messages: list[CheckMessage] = []
    try:
        memoryhub_settings.recency_half_life()
    except ValueError as exc:
        messages.append(
            Error(
                f"MEMORYHUB['RECENCY_HALF_LIFE']: {exc}.",
                hint="E.g. 7 * 86400 (a week), timedelta(days=7), or None (no boost).",
                id="memoryhub.E016",
            )
        )
    try:
        grounding_fields(memoryhub_settings.GROUNDING_FORMAT)
    except ValueError as exc:
        messages.append(
            Error(
                f"MEMORYHUB['GROUNDING_FORMAT']: {exc}.",
                hint='E.g. "[{source}] {content}" (the default) or '
                '"[{source} {occurred:%Y-%m-%d}] {content}".',
                id="memoryhub.E017",
            )
        )
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


def _check_reranker() -> list[CheckMessage]:
    """``memoryhub.E014``: a ``RERANKER`` that cannot be imported or built, or is not a
    ``DocumentReranker``, would fail every query's rerank (each then answers in the
    fused order, with a warning): say so at startup instead."""
    from .rerankers import DocumentReranker

    path = memoryhub_settings.RERANKER
    options = memoryhub_settings.RERANKER_OPTIONS
    if path is None:
        return []
    hint = "Use e.g. 'memoryhub.rerankers.HttpReranker' with RERANKER_OPTIONS, or None."
    if not isinstance(path, str):
        return [
            Error(f"MEMORYHUB['RERANKER'] = {path!r} is not an import path.", id="memoryhub.E014")
        ]
    if not isinstance(options, dict):
        return [Error("MEMORYHUB['RERANKER_OPTIONS'] must be a dict.", id="memoryhub.E014")]
    try:
        reranker = import_string(path)(**options)
    except ImportError as exc:
        message = f"MEMORYHUB['RERANKER'] = {path!r} cannot be imported: {exc}"
        return [Error(message, hint=hint, id="memoryhub.E014")]
    except Exception as exc:
        message = f"The reranker {path!r} cannot be built with its RERANKER_OPTIONS: {exc}"
        return [Error(message, id="memoryhub.E014")]
    if not isinstance(reranker, DocumentReranker):
        message = f"{path!r} is not a DocumentReranker (name, rerank(query, documents, *, top_n))."
        return [Error(message, hint=hint, id="memoryhub.E014")]
    return []


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
