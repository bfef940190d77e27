"""System checks: a misconfiguration is reported by ``manage.py check`` at startup.

Every problem a check can report is declared once in ``PROBLEMS``, with its id, its level
and the text of its message; a check reports one with ``report(id, **fields)``. One id
names one problem, so an id can be silenced (``SILENCED_SYSTEM_CHECKS``) or looked up in
the checks reference (generated from ``PROBLEMS``) without hiding or meaning another.
``MemoryhubConfig.ready`` registers the four checks:

* ``check_settings``: the shape and values of ``settings.MEMORYHUB``, the columns and
  cache it names, the embedder and the reranker;
* ``check_deploy_settings`` (``check --deploy``): production-only warnings;
* ``check_database`` (tagged ``database``, run by ``migrate``): PostgreSQL with pgvector;
* ``check_broker``: tasks are eager or sent to a broker, and the sweep is scheduled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from celery import current_app
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.db import connections
from django.utils.module_loading import import_string

from .conf import DEFAULTS, MAX_INDEXED_METADATA_KEYS, SETTINGS, memoryhub_settings, parse_rate
from .embedders import Embedder
from .filters import MAX_KEY_LENGTH
from .items import grounding_fields
from .rerankers import DocumentReranker
from .schedule import SWEEP_TASK, beat_schedule


@dataclass(frozen=True)
class Problem:
    """One problem a system check reports: its id, level, what is wrong (``summary``, for
    the reference) and the message and hint it is reported with, ``str.format``
    templates over the fields the check fills in."""

    id: str
    level: type[Error | Warning]
    summary: str
    message: str
    hint: str = ""


_RERANKER_HINT = "Use e.g. 'memoryhub.rerankers.HttpReranker' with RERANKER_OPTIONS, or None."

PROBLEMS: tuple[Problem, ...] = (
    Problem(
        "memoryhub.E001",
        Error,
        "`MEMORYHUB` is not a dict.",
        "settings.MEMORYHUB must be a dict.",
    ),
    Problem(
        "memoryhub.W001",
        Warning,
        "`MEMORYHUB` has a key that is not a memoryhub setting (it is ignored).",
        "Unknown memoryhub setting MEMORYHUB[{name!r}] is ignored.",
        "Known settings: {known}.",
    ),
    Problem(
        "memoryhub.E002",
        Error,
        "An integer setting is not an integer within its bounds (the settings reference"
        " gives them).",
        "MEMORYHUB[{name!r}] must be an integer {bounds}, not {value!r}.",
    ),
    Problem(
        "memoryhub.E019",
        Error,
        "`DEFAULT_K` is larger than `MAX_K`.",
        "MEMORYHUB['DEFAULT_K'] exceeds MAX_K.",
    ),
    Problem(
        "memoryhub.E005",
        Error,
        "`THROTTLE_RATE` or `AUTH_FAILURE_RATE` is not a rate.",
        "MEMORYHUB[{name!r}]: {error}.",
        "A number of requests per s, min, hour or day ('1200/min'), or None.",
    ),
    Problem(
        "memoryhub.E008",
        Error,
        "`VACUUM_AFTER_ERASURE` is neither seconds nor None.",
        "MEMORYHUB['VACUUM_AFTER_ERASURE'] must be seconds >= 0 or None, not {value!r}.",
    ),
    Problem(
        "memoryhub.E015",
        Error,
        "`HYBRID_VECTOR_WEIGHT` is neither a number from 0 to 1 nor None.",
        "MEMORYHUB['HYBRID_VECTOR_WEIGHT'] must be a number from 0 to 1 or None, not {value!r}.",
    ),
    Problem(
        "memoryhub.E006",
        Error,
        "`SUBJECT_NAMESPACE_PREFIXES` is not a list of non-empty strings.",
        "MEMORYHUB['SUBJECT_NAMESPACE_PREFIXES'] must be a list of non-empty strings or"
        " None, not {value!r}.",
    ),
    Problem(
        "memoryhub.E018",
        Error,
        "`INDEXED_METADATA_KEYS` is not a short list of metadata keys.",
        "MEMORYHUB['INDEXED_METADATA_KEYS'] must be a list of at most {most} metadata keys"
        " (strings of 1 to {longest} characters, no NUL, not starting with $), not {value!r}.",
        "Each key is an index on the records table, paid by every write.",
    ),
    Problem(
        "memoryhub.E007",
        Error,
        "`ERASURE_RECEIPT_KEY` is too short to key the receipts' hashes.",
        "MEMORYHUB['ERASURE_RECEIPT_KEY'] must be a string of at least 32 characters.",
    ),
    Problem(
        "memoryhub.E016",
        Error,
        "`RECENCY_HALF_LIFE` is neither seconds nor a timedelta.",
        "MEMORYHUB['RECENCY_HALF_LIFE']: {error}.",
        "E.g. 7 * 86400 (a week), timedelta(days=7), or None (no boost).",
    ),
    Problem(
        "memoryhub.E017",
        Error,
        "`GROUNDING_FORMAT` cannot render an item.",
        "MEMORYHUB['GROUNDING_FORMAT']: {error}.",
        'E.g. "[{{source}}] {{content}}" (the default) or'
        ' "[{{source}} {{occurred:%Y-%m-%d}}] {{content}}".',
    ),
    Problem(
        "memoryhub.E012",
        Error,
        "A length setting is larger than the column that stores it: the database would"
        " refuse an item the API accepted.",
        "MEMORYHUB[{name!r}] = {value} exceeds its column ({width} characters).",
        "Use at most {width}.",
    ),
    Problem(
        "memoryhub.E013",
        Error,
        "`CACHE_ALIAS` is not a cache of `CACHES`: every query would fail.",
        "MEMORYHUB['CACHE_ALIAS'] = {alias!r} is not in CACHES ({caches}).",
        "Name one of settings.CACHES (a shared one, e.g. Redis, in production).",
    ),
    Problem(
        "memoryhub.E020",
        Error,
        "`EMBEDDER_OPTIONS` is not a dict.",
        "MEMORYHUB['EMBEDDER_OPTIONS'] must be a dict.",
    ),
    Problem(
        "memoryhub.E003",
        Error,
        "`EMBEDDER` cannot be imported.",
        "MEMORYHUB['EMBEDDER'] = {path!r} cannot be imported: {error}",
        "Use e.g. 'memoryhub.embedders.HashingEmbedder'.",
    ),
    Problem(
        "memoryhub.E004",
        Error,
        "The embedder cannot be built with `EMBEDDER_OPTIONS`.",
        "The embedder {path!r} cannot be built with {options!r}: {error}",
    ),
    Problem(
        "memoryhub.E021",
        Error,
        "`EMBEDDER` builds something that is not an `Embedder`.",
        "{path!r} is not an Embedder (name, dimensions, embed_documents, embed_query).",
    ),
    Problem(
        "memoryhub.E022",
        Error,
        "The embedder reports dimensions that are not a positive integer.",
        "{path!r} reports dimensions={dimensions!r}.",
    ),
    Problem(
        "memoryhub.E011",
        Error,
        "`PREVIOUS_EMBEDDERS` is not a list of dicts with an `EMBEDDER` path.",
        "MEMORYHUB['PREVIOUS_EMBEDDERS']{where} must be {shape}.",
        'A list like [{{"EMBEDDER": "memoryhub.embedders.HashingEmbedder"}}].',
    ),
    Problem(
        "memoryhub.E023",
        Error,
        "An embedder of `PREVIOUS_EMBEDDERS` cannot be imported or built.",
        "MEMORYHUB['PREVIOUS_EMBEDDERS'][{index}] cannot be built: {error}",
    ),
    Problem(
        "memoryhub.E024",
        Error,
        "`RERANKER` is neither an import path nor None.",
        "MEMORYHUB['RERANKER'] = {path!r} is not an import path.",
        _RERANKER_HINT,
    ),
    Problem(
        "memoryhub.E025",
        Error,
        "`RERANKER_OPTIONS` is not a dict.",
        "MEMORYHUB['RERANKER_OPTIONS'] must be a dict.",
    ),
    Problem(
        "memoryhub.E014",
        Error,
        "`RERANKER` cannot be imported: every query's rerank would fail (each then answers"
        " in the fused order, with a warning).",
        "MEMORYHUB['RERANKER'] = {path!r} cannot be imported: {error}",
        _RERANKER_HINT,
    ),
    Problem(
        "memoryhub.E026",
        Error,
        "The reranker cannot be built with `RERANKER_OPTIONS`.",
        "The reranker {path!r} cannot be built with its RERANKER_OPTIONS: {error}",
    ),
    Problem(
        "memoryhub.E027",
        Error,
        "`RERANKER` builds something that is not a `DocumentReranker`.",
        "{path!r} is not a DocumentReranker (name, rerank(query, documents, *, top_n)).",
        _RERANKER_HINT,
    ),
    Problem(
        "memoryhub.W002",
        Warning,
        "`check --deploy` only: no `ERASURE_RECEIPT_KEY`, so receipts are keyed with"
        " `SECRET_KEY`, which then cannot be rotated.",
        "MEMORYHUB['ERASURE_RECEIPT_KEY'] is not set: erasure receipts are keyed with "
        "SECRET_KEY, and rotating it makes old receipts unverifiable.",
        "Set it to a long random string and keep it (MEMORYHUB_ERASURE_RECEIPT_KEY).",
    ),
    Problem(
        "memoryhub.E009",
        Error,
        "The database is not PostgreSQL (a database check: `migrate` runs it first).",
        "memoryhub needs PostgreSQL with pgvector; database {alias!r} is {vendor}.",
        "Point DATABASES at PostgreSQL with the vector extension "
        "(pgvector 0.8; e.g. the pgvector/pgvector Docker image).",
    ),
    Problem(
        "memoryhub.E010",
        Error,
        "The PostgreSQL server lacks the `vector` extension (a database check).",
        "The PostgreSQL of database {alias!r} lacks the vector extension.",
        "Install pgvector on the server (e.g. the postgresql-NN-pgvector "
        "package, or the pgvector/pgvector Docker image).",
    ),
    Problem(
        "memoryhub.W003",
        Warning,
        "Tasks are not eager and Celery has no broker: they would go to"
        " `amqp://localhost`, whatever answers there.",
        "Celery has no broker configured and tasks are not eager: memoryhub's "
        "indexing and import tasks would go to amqp://localhost.",
        "Set CELERY_BROKER_URL (with your Celery app configured from Django "
        "settings), or CELERY_TASK_ALWAYS_EAGER = True to run tasks in-process.",
    ),
    Problem(
        "memoryhub.W004",
        Warning,
        "With a broker, the sweep (re-sending lost work, purging expired memory) is not on"
        " Celery beat's schedule.",
        "memoryhub's sweep is not on Celery beat's schedule: work a worker lost "
        "is never sent again and expired memory is never purged.",
        "CELERY_BEAT_SCHEDULE = {{**beat_schedule(MEMORYHUB)}} "
        "(from memoryhub.schedule import beat_schedule), and run beat.",
    ),
    Problem(
        "memoryhub.W006",
        Warning,
        "On a Citus cluster, a table is not distributed (or not a reference table) as"
        " memoryhub needs.",
        "Database {alias!r} is a Citus coordinator, but: {problems}.",
        "Run manage.py memoryhub_citus distribute (after migrate); see the how-to 'Run on Citus'.",
    ),
    Problem(
        "memoryhub.W005",
        Warning,
        "The sweep is on beat's schedule, but not every `SWEEP_INTERVAL` seconds.",
        "memoryhub's sweep is scheduled, but not every SWEEP_INTERVAL ({interval} s).",
        "Build CELERY_BEAT_SCHEDULE with memoryhub.schedule.beat_schedule(MEMORYHUB).",
    ),
)

_PROBLEMS_BY_ID = {problem.id: problem for problem in PROBLEMS}


def report(problem_id: str, /, **fields: Any) -> CheckMessage:
    """The check message of the declared problem ``problem_id``, its message and hint
    filled in with ``fields``."""
    problem = _PROBLEMS_BY_ID[problem_id]
    hint = problem.hint.format(**fields) or None
    return problem.level(problem.message.format(**fields), hint=hint, id=problem.id)


def check_settings(**kwargs: Any) -> list[CheckMessage]:
    """System checks on ``settings.MEMORYHUB``: its shape, its numbers and rates, its
    erasure settings, the columns and cache it names, the embedder and the reranker."""
    user_settings = getattr(settings, "MEMORYHUB", None) or {}
    if not isinstance(user_settings, dict):
        return [report("memoryhub.E001")]
    known = ", ".join(sorted(DEFAULTS))
    messages = [
        report("memoryhub.W001", name=name, known=known)
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


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_numbers() -> list[CheckMessage]:
    """Integer settings within their declared bounds, rates that parse, and
    ``VACUUM_AFTER_ERASURE``."""
    messages: list[CheckMessage] = []
    for name, setting in SETTINGS.items():
        if not setting.integer:
            continue
        value = getattr(memoryhub_settings, name)
        minimum, maximum = setting.minimum, setting.maximum
        if not _is_integer(value) or value < minimum or (maximum is not None and value > maximum):
            bounds = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
            messages.append(report("memoryhub.E002", name=name, bounds=bounds, value=value))
    for name in ("THROTTLE_RATE", "AUTH_FAILURE_RATE"):
        try:
            parse_rate(getattr(memoryhub_settings, name))
        except ValueError as exc:
            messages.append(report("memoryhub.E005", name=name, error=exc))
    vacuum = memoryhub_settings.VACUUM_AFTER_ERASURE
    if vacuum is not None and (not _is_integer(vacuum) or vacuum < 0):
        messages.append(report("memoryhub.E008", value=vacuum))
    return messages


def _check_search() -> list[CheckMessage]:
    """``DEFAULT_K`` within ``MAX_K``, ``HYBRID_VECTOR_WEIGHT`` and
    ``INDEXED_METADATA_KEYS``."""
    messages: list[CheckMessage] = []
    default_k, max_k = memoryhub_settings.DEFAULT_K, memoryhub_settings.MAX_K
    if _is_integer(default_k) and _is_integer(max_k) and default_k > max_k:
        messages.append(report("memoryhub.E019"))
    weight = memoryhub_settings.HYBRID_VECTOR_WEIGHT
    if weight is not None and (
        isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight <= 1
    ):
        messages.append(report("memoryhub.E015", value=weight))
    keys = memoryhub_settings.INDEXED_METADATA_KEYS
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
            report(
                "memoryhub.E018",
                most=MAX_INDEXED_METADATA_KEYS,
                longest=MAX_KEY_LENGTH,
                value=keys,
            )
        )
    return messages


def _check_erasure_settings() -> list[CheckMessage]:
    """``SUBJECT_NAMESPACE_PREFIXES`` and ``ERASURE_RECEIPT_KEY``."""
    messages: list[CheckMessage] = []
    prefixes = memoryhub_settings.SUBJECT_NAMESPACE_PREFIXES
    if prefixes is not None and (
        isinstance(prefixes, str)
        or not isinstance(prefixes, list | tuple)
        or not all(isinstance(prefix, str) and prefix for prefix in prefixes)
    ):
        messages.append(report("memoryhub.E006", value=prefixes))
    receipt_key = memoryhub_settings.ERASURE_RECEIPT_KEY
    if receipt_key is not None and (not isinstance(receipt_key, str) or len(receipt_key) < 32):
        messages.append(report("memoryhub.E007"))
    return messages


def _check_time_aware() -> list[CheckMessage]:
    """A recency half-life that is seconds or a timedelta, and a grounding format that
    renders an item."""
    messages: list[CheckMessage] = []
    try:
        memoryhub_settings.recency_half_life()
    except ValueError as exc:
        messages.append(report("memoryhub.E016", error=exc))
    try:
        grounding_fields(memoryhub_settings.GROUNDING_FORMAT)
    except ValueError as exc:
        messages.append(report("memoryhub.E017", error=exc))
    return messages


def _check_columns() -> list[CheckMessage]:
    """A length setting larger than the column that stores it would accept an item the
    database then refuses (a 500 mid-write instead of a 400)."""
    from .models import MemoryRecord

    fields = MemoryRecord._meta
    columns = {
        "MAX_KEY_LENGTH": fields.get_field("key").max_length,
        "MAX_NAMESPACE_LENGTH": fields.get_field("namespace").max_length,
        "MAX_TAG_LENGTH": fields.get_field("tags").base_field.max_length,
    }
    return [
        report("memoryhub.E012", name=name, value=value, width=width)
        for name, width in columns.items()
        if isinstance(value := getattr(memoryhub_settings, name), int)
        and width is not None
        and value > width
    ]


def _check_cache_alias() -> list[CheckMessage]:
    """The query cache and the domain generations live in the cache named by
    ``CACHE_ALIAS``; a name ``CACHES`` lacks fails every query at run time."""
    alias = memoryhub_settings.CACHE_ALIAS
    caches = getattr(settings, "CACHES", None) or {"default": {}}
    if alias in caches:
        return []
    return [report("memoryhub.E013", alias=alias, caches=", ".join(caches))]


def _check_embedder() -> list[CheckMessage]:
    """``EMBEDDER`` builds an ``Embedder`` with ``EMBEDDER_OPTIONS``, and so does each
    of ``PREVIOUS_EMBEDDERS``."""
    path = memoryhub_settings.EMBEDDER
    options = memoryhub_settings.EMBEDDER_OPTIONS
    if not isinstance(options, dict):
        return [report("memoryhub.E020")]
    try:
        embedder_class = import_string(path)
    except ImportError as exc:
        return [report("memoryhub.E003", path=path, error=exc)]
    try:
        embedder = embedder_class(**options)
    except Exception as exc:
        return [report("memoryhub.E004", path=path, options=options, error=exc)]
    if not isinstance(embedder, Embedder):
        return [report("memoryhub.E021", path=path)]
    dimensions = embedder.dimensions
    if not _is_integer(dimensions) or dimensions < 1:
        return [report("memoryhub.E022", path=path, dimensions=dimensions)]
    return _check_previous_embedders()


def _check_previous_embedders() -> list[CheckMessage]:
    entries = memoryhub_settings.PREVIOUS_EMBEDDERS
    listed = isinstance(entries, list | tuple)
    malformed = (
        {
            f"[{index}]": "a dict with an EMBEDDER path"
            for index, entry in enumerate(entries)
            if not isinstance(entry, dict) or not isinstance(entry.get("EMBEDDER"), str)
        }
        if listed
        else {"": "a list"}
    )
    messages = [
        report("memoryhub.E011", where=where, shape=shape) for where, shape in malformed.items()
    ]
    for index, entry in enumerate(entries if listed else []):
        if f"[{index}]" in malformed:
            continue
        try:
            import_string(entry["EMBEDDER"])(**entry.get("EMBEDDER_OPTIONS", {}))
        except Exception as exc:
            messages.append(report("memoryhub.E023", index=index, error=exc))
    return messages


def _check_reranker() -> list[CheckMessage]:
    """A ``RERANKER`` that cannot be imported or built, or is not a ``DocumentReranker``,
    would fail every query's rerank (each then answers in the fused order, with a
    warning): say so at startup instead."""
    path = memoryhub_settings.RERANKER
    options = memoryhub_settings.RERANKER_OPTIONS
    if path is None:
        return []
    if not isinstance(path, str):
        return [report("memoryhub.E024", path=path)]
    if not isinstance(options, dict):
        return [report("memoryhub.E025")]
    try:
        reranker_class = import_string(path)
    except ImportError as exc:
        return [report("memoryhub.E014", path=path, error=exc)]
    try:
        reranker = reranker_class(**options)
    except Exception as exc:
        return [report("memoryhub.E026", path=path, error=exc)]
    if not isinstance(reranker, DocumentReranker):
        return [report("memoryhub.E027", path=path)]
    return []


def check_deploy_settings(**kwargs: Any) -> list[CheckMessage]:
    """``manage.py check --deploy``: a receipt key of its own."""
    if memoryhub_settings.ERASURE_RECEIPT_KEY is not None:
        return []
    return [report("memoryhub.W002")]


def check_database(databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Database checks (``migrate`` runs them first): the database must be PostgreSQL
    with the ``vector`` extension available, which SQLite and a PostgreSQL without
    pgvector are not (the first migration would fail with a syntax error half-way)."""
    messages: list[CheckMessage] = []
    for alias in databases or []:
        connection = connections[alias]
        if connection.vendor != "postgresql":
            messages.append(report("memoryhub.E009", alias=alias, vendor=connection.vendor))
            continue
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
                available = cursor.fetchone() is not None
        except Exception:  # unreachable: Django's own checks report the connection
            continue
        if not available:
            messages.append(report("memoryhub.E010", alias=alias))
            continue
        messages += _check_distribution(alias, connection)
    return messages


def _check_distribution(alias: str, connection: Any) -> list[CheckMessage]:
    """On a Citus coordinator: the tables distributed as memoryhub needs them (a warning,
    not an error: ``migrate`` runs this check before the tables exist)."""
    from .services import distribution

    try:
        if not distribution.is_citus(connection):
            return []
        problems = distribution.layout_problems(connection)
    except Exception:  # a database that does not answer is reported by Django's checks
        return []
    if not problems:
        return []
    return [report("memoryhub.W006", alias=alias, problems="; ".join(problems))]


def check_broker(**kwargs: Any) -> list[CheckMessage]:
    """Tasks are eager or go to a configured broker (else Celery would publish to its
    default, ``amqp://localhost``, whatever answers there); with a broker, the sweep is
    on beat's schedule."""
    conf = current_app.conf
    # The Celery app, or the Django settings it is configured from (namespace CELERY),
    # when the app is not imported at check time.
    eager = conf.task_always_eager or getattr(settings, "CELERY_TASK_ALWAYS_EAGER", False)
    broker = conf.broker_url or conf.broker_write_url or getattr(settings, "CELERY_BROKER_URL", "")
    if eager:
        return []
    if broker:
        return _check_beat(conf)
    return [report("memoryhub.W003")]


def _check_beat(conf: Any) -> list[CheckMessage]:
    """With a broker, the sweep (re-sending lost work, purging expired memory) must be on
    beat's schedule, every ``SWEEP_INTERVAL``."""
    schedule = dict(conf.beat_schedule or {}) or dict(
        getattr(settings, "CELERY_BEAT_SCHEDULE", None) or {}
    )
    entries = [entry for entry in schedule.values() if entry.get("task") == SWEEP_TASK]
    wanted = memoryhub_settings.SWEEP_INTERVAL
    if not entries:
        return [report("memoryhub.W004")]
    expected = beat_schedule({"SWEEP_INTERVAL": wanted})["memoryhub-sweep"]["schedule"]
    if all(entry.get("schedule") != expected for entry in entries):
        return [report("memoryhub.W005", interval=wanted)]
    return []
