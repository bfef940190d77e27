"""The ``MEMORYHUB`` settings dict: one declaration per setting, and lazy access to it.

Read settings through ``memoryhub_settings`` (``memoryhub_settings.MAX_K``); values are
read lazily and re-read when a test changes ``settings.MEMORYHUB``. Each setting is
declared once in ``SETTINGS``, with its default, what it means and, for an integer, its
bounds: the system checks (``memoryhub.checks``) and the settings reference of the docs
are built from those declarations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from .embedders import Embedder, HashingEmbedder

if TYPE_CHECKING:
    from .rerankers import DocumentReranker


@dataclass(frozen=True)
class Setting:
    """One key of ``MEMORYHUB``: its default and what it means; an integer setting
    also has the bounds its system check enforces (``maximum`` None: unbounded)."""

    default: Any
    doc: str
    minimum: int | None = field(default=None, kw_only=True)
    maximum: int | None = field(default=None, kw_only=True)

    @property
    def integer(self) -> bool:
        return self.minimum is not None


#: The most metadata keys ``INDEXED_METADATA_KEYS`` may name (an index each).
MAX_INDEXED_METADATA_KEYS = 16

SETTINGS: dict[str, Setting] = {
    "EMBEDDER": Setting(
        "memoryhub.embedders.HashingEmbedder", "Import path of the embedder class."
    ),
    "EMBEDDER_OPTIONS": Setting({}, "Keyword options the embedder is built with."),
    "PREVIOUS_EMBEDDERS": Setting(
        [],
        "Embedders records may still carry vectors of, after a change of EMBEDDER: each a"
        ' {"EMBEDDER": path, "EMBEDDER_OPTIONS": {...}}. Queries embed the query with each'
        " model still present in the scope, so old vectors serve until re-embedding is"
        " done (the default HashingEmbedder family is recognised by its name without this).",
    ),
    "HISTORY_VERSIONS": Setting(
        50, "Previous states kept per record (the oldest dropped); 0 keeps none.", minimum=0
    ),
    "CONSOLIDATION_EXTRACTOR": Setting(
        None,
        "The extractor consolidating episodic turns into semantic facts: an import path to"
        " a class or factory; None: from MEMORYHUB_LLM_* in the environment, else the"
        " built-in one.",
    ),
    "CONSOLIDATION_BATCH": Setting(50, "Episodic turns consolidated per run.", minimum=1),
    "CONSOLIDATION_FACTS": Setting(20, "Similar facts shown to the extractor per run.", minimum=1),
    "RERANKER": Setting(
        None,
        "Reranking the fused candidates of a query with a model (a cross-encoder): an"
        " import path to a class or factory building a DocumentReranker; None: no"
        " reranking, the fused order.",
    ),
    "RERANKER_OPTIONS": Setting({}, "Keyword options the reranker is built with."),
    "RERANK_CANDIDATES": Setting(
        50,
        "How many of the best fused candidates the reranker reorders: each is a document"
        " in the reranker's request and a model pass, paid by every query.",
        minimum=1,
        maximum=1_000,
    ),
    "MAX_WRITE_ITEMS": Setting(100, "The most items in one write request.", minimum=1),
    "MAX_CONTENT_LENGTH": Setting(
        20_000, "The longest content of one item (characters).", minimum=1
    ),
    "MAX_METADATA_BYTES": Setting(
        16_384, "The largest metadata of one item (JSON bytes).", minimum=2
    ),
    "MAX_TAGS": Setting(32, "The most tags on one item.", minimum=0),
    "MAX_TAG_LENGTH": Setting(64, "The longest tag (at most its column's width).", minimum=1),
    "MAX_KEY_LENGTH": Setting(255, "The longest key (at most its column's width).", minimum=1),
    "MAX_NAMESPACE_LENGTH": Setting(
        200, "The longest namespace (at most its column's width).", minimum=1
    ),
    "DEFAULT_K": Setting(5, "Results of a query that does not say (at most MAX_K).", minimum=1),
    "MAX_K": Setting(100, "The most results one query may ask for.", minimum=1),
    "MAX_QUERY_LENGTH": Setting(4_000, "The longest query text (characters).", minimum=1),
    "MAX_CONTEXT_TURNS": Setting(
        3,
        "The most neighbouring turns a query's context_turns may ask for on each side of a"
        ' hit (turns of one session: metadata["session"]); each is a row read per hit and'
        " side.",
        minimum=0,
        maximum=20,
    ),
    "RECENCY_HALF_LIFE": Setting(
        None,
        "Recency boost: a record's score is multiplied by 0.5 ** (age / half-life), its"
        " age counted from when it occurred; seconds (or a timedelta), None: off. A"
        " query's recency_half_life overrides it.",
    ),
    "GROUNDING_FORMAT": Setting(
        "[{source}] {content}",
        "One line of the grounding block per item (str.format over source, content, id,"
        ' key, kind, namespace, score, occurred, created), e.g. "[{source}'
        ' {occurred:%Y-%m-%d}] {content}".',
    ),
    "EXACT_SCAN_THRESHOLD": Setting(
        2_000,
        "Vector search scans filtered scopes up to this many rows exactly; larger ones go"
        " through the model's HNSW index with iterative scans.",
        minimum=0,
    ),
    "INDEXED_METADATA_KEYS": Setting(
        [],
        "Metadata keys that vector queries filter on (their `where`): each gets a btree"
        " index of (domain, metadata -> key), built by the sweeper and paid by every write,"
        " and a query filtered on one is scanned exactly up to five times"
        " EXACT_SCAN_THRESHOLD rows (recall 1.0) instead of searching the HNSW graph for"
        " neighbours the filter throws away. At most"
        f" {MAX_INDEXED_METADATA_KEYS} keys.",
    ),
    "HNSW_EF_SEARCH": Setting(200, "pgvector's hnsw.ef_search for vector queries.", minimum=1),
    "HNSW_MAX_SCAN_TUPLES": Setting(
        40_000, "pgvector's hnsw.max_scan_tuples for iterative scans.", minimum=1
    ),
    "HYBRID_VECTOR_WEIGHT": Setting(
        None,
        "Hybrid search: the vector leg's share of the fused score (the keyword leg has the"
        " rest), from 0 to 1; None: the embedder's own default (hybrid_vector_weight: 0.3"
        " for the hashing embedder, 0.4 for real models). A domain's own weight (admin)"
        " takes precedence.",
    ),
    "TURN_CONTEXT": Setting(
        False,
        'Embed each conversation turn (a record naming metadata["session"]) with the turn'
        " before it in its session: its vector is the normalised sum of the turn's"
        " embedding and of the two turns' together, so a turn that answers (\"yes, last"
        ' May") carries what it answers. A second embedding per turn; forgetting a turn'
        " re-embeds the turn after it. Recommended with a real model (local-embeddings).",
    ),
    "SESSION_BOOST": Setting(
        0.2,
        'Hybrid search over conversation turns (records naming metadata["session"]): each'
        " candidate gains this share of its session's weight among the 20 best (the sum"
        " of their scores, over the heaviest session's), so evidence told across a few"
        " turns of one session ranks together; 0: off.",
    ),
    "SPEAKER_BOOST": Setting(
        0.45,
        "Hybrid search over conversation turns: when a question names exactly one of the"
        ' candidates\' speakers (metadata["speaker"], else a "Name: " prefix of the'
        " content), that speaker's turns gain this much; 0: off.",
    ),
    "STATEMENT_BOOST": Setting(
        0.3,
        "Hybrid search over conversation turns: a turn that does not end with a question"
        " mark gains this much (a turn that asks is rarely the one that answers); 0: off.",
    ),
    "LENGTH_BOOST": Setting(
        0.45,
        "Hybrid search over conversation turns: a turn gains this much times"
        " ln(1 + its characters) / ln(401), at most this much (a turn that says more"
        ' answers more often than "haha, same"); 0: off.',
    ),
    "TENANT_INDEX_MIN_RECORDS": Setting(
        10_000,
        "A domain with at least this many records gets its own (partial) HNSW index, built"
        " by the sweeper; its queries search that index with the same effort per record"
        " as the shared one (0 disables).",
        minimum=0,
    ),
    "KEYWORD_STATISTICS_MIN_RECORDS": Setting(
        5_000,
        "A domain with at least this many records has its words counted by the sweeper:"
        " its keyword leg then ranks the records holding a query's rarest words, about"
        " KEYWORD_RANK_BUDGET of them, instead of every record holding any of its words"
        " (0 disables).",
        minimum=0,
    ),
    "KEYWORD_RANK_BUDGET": Setting(
        200,
        "About how many records the keyword leg ranks in a domain whose words are"
        " counted (never more than ten times this).",
        minimum=1,
    ),
    "CACHE_ALIAS": Setting(
        "default",
        "The cache (a name in CACHES) holding query results, domain generations and"
        " throttle counters; several web processes need a shared one.",
    ),
    "CACHE_TTL": Setting(
        60, "Seconds a query result stays in the cache (0 disables it).", minimum=0
    ),
    "INDEX_BATCH_SIZE": Setting(64, "Records embedded per indexing task.", minimum=1),
    "BULK_MIN_RECORDS": Setting(
        10,
        "A write creating at least this many records copies them in with one binary COPY,"
        " and an indexing batch of at least this many records stores its vectors the same"
        " way, outside the shared HNSW index where an exact scan or a bulk-built index"
        " serves them; smaller ones (an agent's turn) go row by row.",
        minimum=1,
    ),
    "BULK_INDEX_BATCH_SIZE": Setting(
        500, "Records embedded per task for a bulk write, an import or a re-embed.", minimum=1
    ),
    "BULK_DELTA_MAX": Setting(
        20_000,
        "A domain's delta (vectors stored in bulk that its own HNSW index does not hold"
        " yet, scanned exactly by its vector queries until the index is built again, which"
        " it is once the delta outgrows the index) stays within this many records, or"
        " twice what its index covers if that is more; past it (a load outrunning the"
        " rebuilds), bulk-stored vectors go into the domain's own index row by row.",
        minimum=0,
    ),
    "INDEX_MAX_ATTEMPTS": Setting(
        5, "Attempts at embedding a record before it is marked failed.", minimum=1
    ),
    "SWEEP_PENDING_AFTER": Setting(
        300,
        "The sweeper re-enqueues records pending for longer than this (seconds) when it"
        " cannot tell whether a worker holds them (an earlier release's workers).",
        minimum=1,
    ),
    "SWEEP_ORPHANED_AFTER": Setting(
        30,
        "The sweeper re-enqueues records pending for longer than this (seconds) that no"
        " message in the broker's queue and no live worker holds (a worker killed"
        " mid-batch); a worker silent for WORKER_STALE_AFTER seconds is taken as gone.",
        minimum=1,
    ),
    "SWEEP_INTERVAL": Setting(
        30,
        "Seconds between two sweeps: CELERY_BEAT_SCHEDULE = beat_schedule(MEMORYHUB)"
        " (memoryhub.schedule) schedules them (memoryhub.W004 and W005 warn otherwise).",
        minimum=1,
    ),
    "OBSERVATION_RETENTION_DAYS": Setting(
        90, "Observations older than this many days are purged by the sweeper.", minimum=1
    ),
    "MAX_WAIT_SECONDS": Setting(30, "Upper bound of ?wait= on writes, in seconds.", minimum=0),
    "THROTTLE_RATE": Setting(
        "1200/min",
        "Requests per API key (DRF rate syntax); None disables throttling. A moving window"
        " (the limits library's) in the Redis of CACHE_ALIAS's cache: at most this many in"
        " any span of the period, exact under concurrency; with a local-memory cache, per"
        " process.",
    ),
    "SUBJECT_NAMESPACE_PREFIXES": Setting(
        ["user:", "session:"],
        "Namespaces of data subjects: an agent's forget of one of these reaches read-only"
        " knowledge bases too (GDPR erasure); None: every non-shared namespace.",
    ),
    "ERASURE_RECEIPT_KEY": Setting(
        None,
        "The key (at least 32 characters) of the HMAC that receipts keep instead of a"
        " namespace or key; None: the site's SECRET_KEY, which then cannot be rotated"
        " without making old receipts impossible to look up (memoryhub.W002 in check"
        " --deploy). Keep it: rotating it orphans old receipts too.",
    ),
    "VACUUM_AFTER_ERASURE": Setting(
        30,
        "Seconds after an erasure within which the erased tables are vacuumed and analysed"
        " (dead tuples and planner samples of erased rows go); None leaves it to"
        " autovacuum.",
    ),
    "AUTH_FAILURE_RATE": Setting(
        "30/min",
        "Failed API-key authentications (401s: unknown, revoked or malformed keys) per"
        " client address before it is refused with 429 (DRF rate syntax); None disables"
        " the limit. Checked and counted in one atomic step, so many clients guessing at"
        " once get exactly the limit of 401s. The address is REMOTE_ADDR; behind proxies"
        " set DRF's NUM_PROXIES so it is read from X-Forwarded-For. Expired keys and keys"
        " of suspended orgs are not counted.",
    ),
    "WORKER_STALE_AFTER": Setting(
        60,
        "Health reports degraded when records have waited longer than this many seconds"
        " and no worker has sent a heartbeat for as long (broker mode only); /readyz is"
        " unready when no worker has sent one for as long.",
        minimum=1,
    ),
    "METRICS_TOKEN": Setting(
        None,
        "The bearer token GET /metrics requires (Authorization: Bearer <token>); unset,"
        " /metrics answers loopback addresses only. The standalone site reads it from"
        " MEMORYHUB_METRICS_TOKEN.",
    ),
    "ARCHIVE_RETENTION": Setting(
        86_400,
        "Seconds an org archive exported from the admin is kept for download (the sweeper"
        " deletes it then, and any erasure in its org deletes it at once).",
        minimum=1,
    ),
    "IDEMPOTENCY_TTL": Setting(
        86_400,
        "Seconds the first answer to a request sent with an Idempotency-Key is kept for"
        " its retries (the sweeper deletes older ones).",
        minimum=1,
    ),
    "INDEXING_LAG_DEGRADED_AFTER": Setting(
        900,
        "Health reports degraded when the oldest pending record has waited longer than"
        " this many seconds, workers or not (a backlog, an embedder that keeps failing).",
        minimum=1,
    ),
    "WORKER_HEARTBEAT_INTERVAL": Setting(
        15, "How often a worker writes its heartbeat, in seconds.", minimum=1
    ),
    "MAX_BODY_BYTES": Setting(
        4 * 1024 * 1024,
        "Largest JSON body the API reads (bytes); larger ones get a 413.",
        minimum=1024,
    ),
    "USER_NAMESPACE": Setting(
        "user:{pk}",
        "The namespace of a host user's memory (memoryhub.namespaces.for_user), formatted"
        " with the user's pk and username.",
    ),
    "API_AUTHENTICATION_CLASSES": Setting(
        [],
        "Authentication classes (dotted paths) the API accepts besides API keys and staff"
        " sessions; the host's REST_FRAMEWORK defaults never apply to memoryhub's API.",
    ),
    "IMPORT_MAX_BYTES": Setting(
        1024**3,
        "Largest file the admin imports (bytes); it is streamed into the database in 1 MB"
        " chunks and read back one chunk at a time, never held whole in memory.",
        minimum=1,
    ),
}

#: Each setting's default, as ``memoryhub_settings`` falls back to it.
DEFAULTS: dict[str, Any] = {name: setting.default for name, setting in SETTINGS.items()}


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
