"""KnowledgeBase, MemoryRecord and Observation: memory and its operator timeline.

Every tenant-scoped model derives from :class:`TenantScopedModel` and so has two
managers:

* ``objects`` is scoped by django-scopes on ``(org, domain)``: outside an active
  :func:`memoryhub.scope.tenant_scope` every query raises ``ScopeError`` rather than
  returning every tenant's rows;
* ``unscoped`` is the explicit operator path (admin, erasure, sweeper), and the base
  manager, so related lookups such as ``record.knowledge_base`` keep working.
"""

from __future__ import annotations

import hashlib
import unicodedata
import uuid
from datetime import datetime
from typing import Any, cast

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import Case, F, Func, Q, Value, When
from django.db.models.expressions import CombinedExpression
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Coalesce, Collate, Length
from django.db.models.lookups import Exact, GreaterThanOrEqual, LessThan, LessThanOrEqual
from django.db.models.sql.where import WhereNode
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django_scopes import ScopedManager
from pgvector.django import VectorField

#: The full-text search configuration of the generated ``search_vector`` column.
SEARCH_CONFIG = "english"

#: The characters that join words into one token of PostgreSQL's parser.
JOINERS = "./:@"
#: A tag ("<unk>", "</s>"): PostgreSQL's parser drops it.
TAG = r"</?\w+>"
#: Words joined by dots, slashes, colons or at signs ("enum.IntEnum", "pytest.main",
#: "a/b/c", "https://docs.python.org/3/library", "bob@example.com"): PostgreSQL's parser
#: reads each as one token (a host name, a file path, a URL, an e-mail address) whose
#: only lexeme is the whole of it, or drops it (a URL's "https://"), so a question
#: asking for "IntEnum" would never match it; and tags.
COMPOUND = rf"\w+(?:[{JOINERS}]+\w+)+|{TAG}"

#: Content holding a compound (:data:`COMPOUND`), as a cheaper test.
HOLDS_COMPOUND = rf"\w[{JOINERS}]+\w|{TAG}"

#: What the second part of the search vector turns into spaces in its compounds.
_SPLIT_AT = JOINERS + "<>"


def search_vector() -> CombinedExpression:
    """The generated ``search_vector``: the content's lexemes, then the words of its
    compounds (:data:`COMPOUND`) as lexemes of their own.

    The second part is the content with everything but its compounds replaced by
    spaces, then their dots, slashes, colons, at signs and angle brackets (PostgreSQL's
    regular expressions take the longest alternative: a compound rather than a word,
    and the run of other characters stops before a tag's ``<``); the regular
    expressions run only on content holding one. Splitting every token instead
    (``translate`` of the whole content) costs as much and counts every word twice."""
    compounds = Func(
        F("content"),
        Value(f"({COMPOUND})|\\w+|[^\\w<]+|<"),
        Value(r"\1 "),
        Value("g"),
        function="regexp_replace",
        output_field=models.TextField(),
    )
    parts = Case(
        When(
            content__regex=HOLDS_COMPOUND,
            then=Func(
                compounds,
                Value(_SPLIT_AT),
                Value(" " * len(_SPLIT_AT)),
                function="translate",
            ),
        ),
        default=Value(""),
        output_field=models.TextField(),
    )
    return SearchVector("content", config=SEARCH_CONFIG) + SearchVector(parts, config=SEARCH_CONFIG)


def normalize_content(content: str) -> str:
    """Content as compared for dedupe: NFKC, case-folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", content).casefold().split())


def content_hash(content: str) -> str:
    """SHA-256 of the normalised content."""
    return hashlib.sha256(normalize_content(content).encode("utf-8")).hexdigest()


def _tenant_key(to: str, verbose_name: Any, options: dict[str, Any]) -> models.ForeignKey[Any, Any]:
    defaults = {"on_delete": models.CASCADE, "related_name": "+", "verbose_name": verbose_name}
    return models.ForeignKey(to, **{**defaults, **options})


def org_key(**options: Any) -> models.ForeignKey[Any, Any]:
    """The foreign key to a row's org as :class:`TenantScopedModel` declares it;
    ``options`` are one model's exceptions to it."""
    return _tenant_key("tenants.Org", _("org"), options)


def domain_key(**options: Any) -> models.ForeignKey[Any, Any]:
    """The foreign key to a row's domain as :class:`TenantScopedModel` declares it;
    ``options`` are one model's exceptions to it."""
    return _tenant_key("tenants.Domain", _("domain"), options)


class TenantForeignKey(models.ForeignKey):
    """A foreign key between two tables of one org's data: its joins also match the org
    (``target.org_id = source.org_id``). The org holds nothing more than the key did,
    but a cluster distributed by org then sees a join inside one shard group, and the
    key's index (``(x_id, org_id)``) serves it. The migrations see a ``ForeignKey``."""

    def get_extra_restriction(self, alias: str | None, related_alias: str | None) -> Any:
        if alias is None or related_alias is None:  # a subquery pushdown: the key alone
            return None
        own = cast("models.Field[Any, Any]", self.model._meta.get_field("org"))
        theirs = cast("models.Field[Any, Any]", self.related_model._meta.get_field("org"))
        condition: Any = Exact(theirs.get_col(alias), own.get_col(related_alias))
        return WhereNode([condition])

    def deconstruct(self) -> Any:
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.ForeignKey", args, kwargs


def scoped_manager(manager_class: type[models.Manager[Any]] = models.Manager) -> Any:
    """A manager that answers only inside a tenant scope (django-scopes on the org and
    domain ids) and raises ``ScopeError`` outside one."""
    return ScopedManager(org="org_id", domain="domain_id", _manager_class=manager_class)


class TenantScopedModel(models.Model):
    """A row that belongs to one org and one of its domains, and is read only inside
    their scope: ``objects`` refuses a query outside :func:`memoryhub.scope.tenant_scope`,
    ``unscoped`` is the operator path and the base manager (related lookups work on it).

    A model with a queryset of its own declares both managers again over it
    (``scoped_manager(Manager)`` and ``Manager()``). Where a model's keys differ from
    the ones here it declares that key itself with :func:`org_key` or :func:`domain_key`
    and only the difference, because changing the existing columns or their migration
    state is not this class's to do:

    * ``MemoryRecord`` and ``RecordVersion`` index neither key on its own
      (``db_index=False``): composite indexes lead with them, and a single-column index
      on a million-row table would be a schema change with a cost;
    * ``RecordVersion``'s keys have no verbose names (adding them is a migration);
    * ``KnowledgeBase.domain`` is reachable from the domain (``domain.knowledge_bases``);
    * ``Observation.domain`` is optional: some observations are about the whole org;
    * ``ErasureReceipt`` keeps plain ids instead of the keys (``org = domain = None``):
      a receipt outlives the org and domain it speaks of.
    """

    org = org_key()
    domain = domain_key()

    objects = scoped_manager()
    unscoped = models.Manager()  # noqa: DJ012 (ScopedManager() is a manager, not a field)

    class Meta:
        abstract = True
        default_manager_name = "objects"
        base_manager_name = "unscoped"

    def _do_update(self, base_qs: Any, using: Any, pk_val: Any, values: Any, *args: Any) -> Any:
        # A saved row keeps its org (the distribution column of a cluster, which an
        # UPDATE may not set), and is found by its org with its id: one shard group.
        values = [value for value in values if value[0].attname != "org_id"]
        return super()._do_update(base_qs.filter(org_id=self.org_id), using, pk_val, values, *args)


class KnowledgeBaseQuerySet(models.QuerySet["KnowledgeBase"]):
    """Whether a knowledge base takes a write is the policy's to say
    (``policy.refuses_change``), not a filter's."""


class KnowledgeBase(TenantScopedModel):
    """A named source of memory inside a domain; ``name`` is what items carry as source."""

    DEFAULT_NAME = "memory"

    class OnWrite(models.TextChoices):
        REFUSE = "refuse", _("Refuse (403)")
        IGNORE = "ignore", _("Ignore (report as refused)")

    domain = domain_key(related_name="knowledge_bases")
    name = models.SlugField(
        _("name"),
        max_length=64,
        help_text=_("Unique in its domain; returned items carry it as their source."),
    )
    description = models.TextField(_("description"), blank=True, default="")
    read_only = models.BooleanField(
        _("read-only"),
        default=False,
        help_text=_("Agents may read but not write it; operators curate it in the admin."),
    )
    on_write = models.CharField(
        _("on write"),
        max_length=8,
        choices=OnWrite,
        default=OnWrite.REFUSE,
        help_text=_("What a write through the API does to a read-only knowledge base."),
    )
    refused_writes = models.PositiveBigIntegerField(_("refused writes"), default=0)
    consolidate = models.BooleanField(
        _("consolidate"),
        default=False,
        help_text=_(
            "Turn episodic records written here into semantic facts (with their sources), "
            "in the background; a write can also ask for it."
        ),
    )
    #: Set when an operator deleted it: a worker is erasing its records (then the row).
    #: It takes no writes meanwhile.
    deleting_since = models.DateTimeField(_("being deleted since"), null=True, blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    objects = scoped_manager(models.Manager.from_queryset(KnowledgeBaseQuerySet))
    unscoped = models.Manager.from_queryset(KnowledgeBaseQuerySet)()

    class Meta(TenantScopedModel.Meta):
        verbose_name = _("knowledge base")
        verbose_name_plural = _("knowledge bases")
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["domain", "name", "org"], name="memoryhub_kb_unique_name"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def accepts_writes(self) -> bool:
        return not self.read_only


def live_q(prefix: str = "", now: object = None) -> Q:
    """The one expiry rule: a record is live until its ``expires_at`` (none: forever).
    ``prefix`` reaches records through a relation (``"records__"``); ``now`` defaults to
    the clock (pass ``Now()`` for a statement reused later: the server's now)."""
    moment = now or timezone.now()
    return Q(**{f"{prefix}expires_at__isnull": True}) | Q(**{f"{prefix}expires_at__gt": moment})


def valid_q(at: object = None, *, as_of: bool = False) -> Q:
    """The one validity rule: a record is valid from its ``valid_from`` (empty: always)
    until its ``valid_until`` (exclusive; empty: still). ``at`` defaults to the clock
    (``Now()`` for a reused statement). ``as_of`` asks what memory held at a moment in
    the past: a record whose ``valid_from`` is empty counts from when it occurred
    (:func:`occurred`), so what was said later is not yet known then."""
    moment = at or timezone.now()
    until = Q(valid_until__isnull=True) | Q(valid_until__gt=moment)
    if as_of:
        return until & Q(LessThanOrEqual(Coalesce(F("valid_from"), occurred()), moment))
    return until & (Q(valid_from__isnull=True) | Q(valid_from__lte=moment))


#: The same rule in SQL, for statements written by hand (``{table}``: the records alias).
LIVE_SQL = "({table}.expires_at IS NULL OR {table}.expires_at > now())"


def occurred() -> Coalesce:
    """The one rule of when a record's content happened (or was said): its
    ``occurred_at``, and when that is not set (every record older than the column, and
    those written without one) its ``created_at``."""
    return Coalesce(F("occurred_at"), F("created_at"))


#: The same expression in SQL (statements written by hand; the indexes on the expression
#: serve both spellings: keep them equal).
OCCURRED_SQL = "COALESCE({table}.occurred_at, {table}.created_at)"

#: A conversation turn names its session in ``metadata["session"]`` (a string or an
#: integer, at most ``SESSION_MAX_LENGTH`` characters): a query's ``context_turns``
#: returns a hit's neighbouring turns of the same session, namespace and knowledge base.
SESSION_KEY = "session"
SESSION_MAX_LENGTH = 200


def session() -> KeyTextTransform:
    """A record's session id as text (NULL when its metadata names none)."""
    return KeyTextTransform(SESSION_KEY, "metadata")


#: The session in SQL, and the condition of the turns index in SQL: a statement that
#: means to use the index states the condition as it is written here.
SESSION_SQL = f"({{table}}.metadata ->> '{SESSION_KEY}')"
TURN_SQL = f"length({SESSION_SQL}) <= {SESSION_MAX_LENGTH}"


def adjacent_turn_sql(table: str, *, after: bool, ids: str = "= ANY(%s::uuid[])") -> str:
    """A statement giving, for each of org ``%s``'s records whose id is ``ids`` (by
    default ``= ANY(%s)`` of a uuid[]; a subquery's ``IN (…)`` works too) that names a
    session, the turn just before it (``after`` False) or just after it in its session
    (same knowledge base and namespace, ordered by when it occurred, ties by id): rows of
    (record id, turn id, turn content). One index range scan of the turns index per
    record, stopping at the first row."""
    occurred_n = OCCURRED_SQL.format(table="n")
    occurred_r = OCCURRED_SQL.format(table="r")
    compare, order = (">", "") if after else ("<", " DESC")
    return (
        f"SELECT r.id, t.id, t.content FROM {table} r CROSS JOIN LATERAL ("
        f"SELECT n.id, n.content FROM {table} n"
        " WHERE n.org_id = r.org_id AND n.domain_id = r.domain_id"
        " AND n.knowledge_base_id = r.knowledge_base_id AND n.namespace = r.namespace"
        f" AND {SESSION_SQL.format(table='n')} = {SESSION_SQL.format(table='r')}"
        f" AND {TURN_SQL.format(table='n')}"
        f" AND {occurred_n} {compare}= {occurred_r}"
        f" AND ({occurred_n}, n.id) {compare} ({occurred_r}, r.id)"
        f" ORDER BY {occurred_n}{order}, n.id{order} LIMIT 1) t"
        f" WHERE r.org_id = %s AND r.id {ids} AND {TURN_SQL.format(table='r')}"
    )


class MemoryRecordQuerySet(models.QuerySet["MemoryRecord"]):
    def live(self, now: object = None) -> MemoryRecordQuerySet:
        """Records that have not expired."""
        return self.filter(live_q(now=now))

    def expired(self, now: object = None) -> MemoryRecordQuerySet:
        """Records past their expiry (what the sweeper purges): the complement of
        :func:`live_q`, spelled so the partial expiry index answers it."""
        return self.filter(expires_at__lte=now or timezone.now())

    def in_namespaces(self, namespaces: list[str]) -> MemoryRecordQuerySet:
        return self.filter(namespace__in=namespaces)

    def pending(self) -> MemoryRecordQuerySet:
        return self.filter(status=MemoryRecord.Status.PENDING)

    def indexed_with(self, model_name: str) -> MemoryRecordQuerySet:
        return self.filter(status=MemoryRecord.Status.INDEXED, embedding_model=model_name)

    def occurred_between(self, after: object = None, before: object = None) -> MemoryRecordQuerySet:
        """Records whose content happened at ``after`` or later and before ``before``
        (a half-open range; ``None``: unbounded on that side), by :func:`occurred`."""
        records = self
        if after is not None:
            records = records.filter(GreaterThanOrEqual(occurred(), after))
        if before is not None:
            records = records.filter(LessThan(occurred(), before))
        return records


MemoryRecordManager = models.Manager.from_queryset(MemoryRecordQuerySet)


class MemoryRecord(TenantScopedModel):
    """One remembered item: content, its metadata, and (once indexed) its embedding."""

    class Kind(models.TextChoices):
        EPISODIC = "episodic", _("Episodic: what happened")
        SEMANTIC = "semantic", _("Semantic: what we know")
        PROCEDURAL = "procedural", _("Procedural: how we did it")

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        INDEXED = "indexed", _("Indexed")
        FAILED = "failed", _("Failed")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Both are covered by composite indexes that lead with them (see Meta.indexes).
    org = org_key(db_index=False)
    domain = domain_key(db_index=False)
    knowledge_base = TenantForeignKey(
        KnowledgeBase,
        on_delete=models.CASCADE,
        related_name="records",
        verbose_name=_("knowledge base"),
        db_constraint=False,  # a key with org_id in it: distribution.TENANT_KEYS
    )
    namespace = models.CharField(
        _("namespace"),
        max_length=200,
        blank=True,
        default="",
        help_text=_("Partition inside the domain, e.g. user:alice; empty means shared."),
    )
    key = models.CharField(
        _("key"),
        max_length=255,
        null=True,
        blank=True,
        help_text=_("Optional; writing the same key again replaces the record."),
    )
    kind = models.CharField(_("kind"), max_length=16, choices=Kind, default=Kind.SEMANTIC)
    content = models.TextField(_("content"))
    content_hash = models.CharField(_("content hash"), max_length=64, editable=False)
    metadata = models.JSONField(_("metadata"), default=dict, blank=True)
    tags = ArrayField(
        models.CharField(max_length=64), verbose_name=_("tags"), default=list, blank=True
    )
    embedding = VectorField(_("embedding"), null=True, blank=True, editable=False)
    embedding_model = models.CharField(
        _("embedding model"), max_length=128, blank=True, default="", editable=False
    )
    status = models.CharField(
        _("status"), max_length=8, choices=Status, default=Status.PENDING, editable=False
    )
    attempts = models.PositiveSmallIntegerField(_("attempts"), default=0, editable=False)
    last_error = models.TextField(_("last error"), blank=True, default="", editable=False)
    search_vector = models.GeneratedField(
        expression=search_vector(),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    created_at = models.DateTimeField(_("created"), default=timezone.now, editable=False)
    #: When the content happened or was said; NULL means when the record was created
    #: (:func:`occurred` is the one place that says so). Nullable, so adding it to a table
    #: of millions of rows rewrote nothing and backfilled nothing.
    occurred_at = models.DateTimeField(
        _("occurred"),
        null=True,
        blank=True,
        help_text=_(
            "When what it says happened or was said (a conversation turn's time); "
            "empty: when the record was created."
        ),
    )
    updated_at = models.DateTimeField(_("updated"), auto_now=True)
    indexed_at = models.DateTimeField(_("indexed"), null=True, blank=True, editable=False)
    expires_at = models.DateTimeField(_("expires"), null=True, blank=True)
    #: When what it says became true and stopped being true (a fact's validity; both
    #: empty: always, as far as memory knows). A query reads what is valid now, or at its
    #: ``as_of`` (:func:`valid_q`); a superseded fact is closed (``valid_until``) and names
    #: the record that superseded it, which then holds its key (services/supersession.py).
    valid_from = models.DateTimeField(
        _("valid from"),
        null=True,
        blank=True,
        help_text=_("When it became true; empty: when it occurred (or was created)."),
    )
    valid_until = models.DateTimeField(
        _("valid until"),
        null=True,
        blank=True,
        help_text=_("When it stopped being true (exclusive); empty: still true."),
    )
    superseded_by = models.UUIDField(_("superseded by"), null=True, blank=True, editable=False)
    #: Its vector was embedded with the turn before it (``TURN_CONTEXT``): forgetting
    #: that turn re-embeds this one (``store.deletion``).
    context_embedded = models.BooleanField(
        _("embedded with its previous turn"), default=False, db_default=False, editable=False
    )
    #: Consolidation (services/consolidation.py): a semantic fact lists the episodic
    #: records it was derived from; an episodic record waits (``pending``) until a worker
    #: has consolidated it (``done``); "" is neither.
    derived_from = ArrayField(
        models.UUIDField(),
        verbose_name=_("derived from"),
        default=list,
        blank=True,
        editable=False,
    )
    consolidation = models.CharField(
        _("consolidation"), max_length=8, blank=True, default="", editable=False
    )
    #: History (services/history.py): the state's number (1 when created, one more per
    #: change), and who made the change that produced it and why; previous states are
    #: ``RecordVersion`` rows.
    version = models.PositiveIntegerField(_("version"), default=1, editable=False)
    changed_by = models.CharField(
        _("changed by"), max_length=200, blank=True, default="", editable=False
    )
    change_cause = models.CharField(_("cause"), max_length=16, default="create", editable=False)
    #: The bulk store that wrote the record's vector (a number from the
    #: ``memoryhub_vector_batch`` sequence), or null when the vector was stored row by row
    #: (it is then in the shared HNSW index, and in its domain's own index if it has
    #: one). A bulk-stored vector is in no shared index: its domain's own index covers it
    #: once that index is built again, and until then queries scan it exactly
    #: (``services/vector_indexes.py``).
    vector_batch = models.BigIntegerField(_("vector batch"), null=True, blank=True, editable=False)
    #: The import that created the record (what undoing that import erases).
    import_job = TenantForeignKey(
        "ImportJob",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        editable=False,
        related_name="+",
        db_index=False,
        verbose_name=_("import"),
        db_constraint=False,  # a key with org_id in it: distribution.TENANT_KEYS
    )

    objects = scoped_manager(MemoryRecordManager)
    unscoped = MemoryRecordManager()

    class Meta(TenantScopedModel.Meta):
        verbose_name = _("memory record")
        verbose_name_plural = _("memory records")
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["knowledge_base", "namespace", "key", "org"],
                condition=Q(key__isnull=False, superseded_by__isnull=True),
                name="memoryhub_record_unique_current_key",
            ),
            models.CheckConstraint(
                condition=Q(status__in=["pending", "indexed", "failed"]),
                name="memoryhub_record_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=["episodic", "semantic", "procedural"]),
                name="memoryhub_record_kind_valid",
            ),
        ]
        indexes = [
            models.Index(
                fields=["org", "domain", "knowledge_base", "namespace"],
                name="memoryhub_record_scope_idx",
            ),
            models.Index(
                fields=["knowledge_base", "namespace", "content_hash"],
                name="memoryhub_record_hash_idx",
            ),
            models.Index(F("domain"), F("created_at").desc(), name="memoryhub_record_recent_idx"),
            models.Index(
                fields=["status", "updated_at"],
                condition=~Q(status="indexed"),
                name="memoryhub_record_unindexed_idx",
            ),
            models.Index(
                fields=["expires_at"],
                condition=Q(expires_at__isnull=False),
                name="memoryhub_record_expiry_idx",
            ),
            # Which models' vectors a domain holds, and how many (a model change is a
            # migration: old vectors serve until re-embedded; services.indexing).
            models.Index(
                fields=["embedding_model", "domain", "status"], name="memoryhub_record_model_idx"
            ),
            models.Index(
                fields=["import_job", "status"],
                condition=Q(import_job__isnull=False),
                name="memoryhub_record_import_idx",
            ),
            # Only facts have sources, only waiting turns are pending: both stay small.
            GinIndex(
                fields=["derived_from"],
                condition=~Q(derived_from=[]),
                name="memoryhub_record_sources_idx",
            ),
            models.Index(
                fields=["knowledge_base", "namespace", "created_at"],
                condition=Q(consolidation="pending"),
                name="memoryhub_record_pending_c_idx",
            ),
            # A domain's bulk-stored vectors not yet in an HNSW index: the exact leg of its
            # vector queries (services/vector_indexes.py).
            models.Index(
                fields=["domain", "vector_batch"],
                condition=Q(vector_batch__isnull=False),
                name="memoryhub_record_delta_idx",
            ),
            GinIndex(fields=["search_vector"], name="memoryhub_record_fts_idx"),
            # The turns whose vectors hold their previous turn (TURN_CONTEXT): what an
            # erasure looks for, and none at all where the setting was never on.
            models.Index(
                fields=["org"],
                condition=Q(context_embedded=True),
                name="memoryhub_record_ctx_idx",
            ),
            # A fact's predecessors (what it superseded): its timeline, and erasure.
            models.Index(
                fields=["superseded_by"],
                condition=Q(superseded_by__isnull=False),
                name="memoryhub_record_chain_idx",
            ),
            GinIndex(fields=["tags"], name="memoryhub_record_tags_idx"),
            # occurred_after/occurred_before: a narrow window of a large domain is read
            # from here, not filtered out of the whole scope (the plan's size count of
            # the window included).
            models.Index(F("domain"), occurred(), name="memoryhub_record_occurred_idx"),
            # A hit's neighbouring turns (a query's context_turns): equality on the
            # knowledge base, namespace and session, then a range on when they occurred,
            # so each hit reads its few neighbours and nothing else. Only records that
            # name a session are in it; the condition also keeps a longer "session"
            # (metadata that predates SESSION_MAX_LENGTH) out of the btree's row limit.
            # A knowledge base's namespaces and key directories, listed one index seek
            # per row (services.records.list_namespaces). In code point order, whatever
            # the database's collation: a prefix's keys are then one range of it.
            models.Index(
                F("knowledge_base"),
                Collate(F("namespace"), "C"),
                Collate(F("key"), "C"),
                name="memoryhub_record_path_idx",
            ),
            models.Index(
                F("knowledge_base"),
                F("namespace"),
                session(),
                occurred(),
                condition=Q(LessThanOrEqual(Length(session()), SESSION_MAX_LENGTH)),
                name="memoryhub_record_turns_idx",
            ),
        ]

    def __str__(self) -> str:
        # Never the content: Django's admin log keeps str(obj) (LogEntry.object_repr),
        # and an erased subject's words must not survive there.
        return f"{self.kind} record {str(self.pk)[:8]}"

    def save(self, *args: object, **kwargs: object) -> None:
        self.content_hash = content_hash(self.content)
        super().save(*args, **kwargs)  # type: ignore[arg-type]

    @property
    def source(self) -> str:
        return self.knowledge_base.name

    @property
    def occurred_or_created(self) -> datetime:
        """When the content happened: :func:`occurred` for a loaded record."""
        return self.occurred_at or self.created_at


class RecordVersion(TenantScopedModel):
    """A previous state of a record: its fields as they were, and how that state came to
    be (``changed_at``, ``actor``, ``cause``). Kept up to ``HISTORY_VERSIONS`` per record
    (the oldest dropped), tenant-scoped like records, and deleted with its record by every
    erasure path (the foreign key cascades)."""

    class Cause(models.TextChoices):
        CREATE = "create", _("created")
        UPSERT = "upsert", _("written again by key")
        UPDATE = "update", _("updated")
        IMPORT = "import", _("imported")
        ADMIN = "admin", _("edited in the admin")
        RESTORE = "restore", _("restored")
        CONSOLIDATION = "consolidation", _("consolidated")
        SUPERSEDE = "supersede", _("superseded")

    id = models.BigAutoField(primary_key=True)
    org = org_key(db_index=False, verbose_name=None)
    domain = domain_key(db_index=False, verbose_name=None)
    record = TenantForeignKey(
        MemoryRecord,
        on_delete=models.CASCADE,
        related_name="versions",
        db_index=False,
        db_constraint=False,  # a key with org_id in it: distribution.TENANT_KEYS
    )
    version = models.PositiveIntegerField(_("version"))
    content = models.TextField(_("content"))
    key = models.CharField(_("key"), max_length=255, null=True, blank=True)
    kind = models.CharField(_("kind"), max_length=16)
    tags = ArrayField(models.CharField(max_length=64), verbose_name=_("tags"), default=list)
    metadata = models.JSONField(_("metadata"), default=dict)
    expires_at = models.DateTimeField(_("expires"), null=True, blank=True)
    occurred_at = models.DateTimeField(_("occurred"), null=True, blank=True)
    valid_from = models.DateTimeField(_("valid from"), null=True, blank=True)
    valid_until = models.DateTimeField(_("valid until"), null=True, blank=True)
    changed_at = models.DateTimeField(_("changed"))
    actor = models.CharField(_("actor"), max_length=200, blank=True, default="")
    cause = models.CharField(_("cause"), max_length=16, choices=Cause)

    class Meta(TenantScopedModel.Meta):
        verbose_name = _("record version")
        verbose_name_plural = _("record versions")
        ordering = ["-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["record", "version", "org"], name="memoryhub_version_unique"
            )
        ]

    def __str__(self) -> str:
        # Never the content (Django's admin log keeps str(obj)).
        return f"version {self.version} of record {str(self.record_id)[:8]}"


class Observation(TenantScopedModel):
    """An append-only entry of the operator timeline (writes, refusals, dedupes, erasures)."""

    class Kind(models.TextChoices):
        MEMORY_WRITTEN = "memory.written", _("memory written")
        MEMORY_WRITE_REFUSED = "memory.write_refused", _("write refused")
        MEMORY_DEDUPLICATED = "memory.deduplicated", _("memory deduplicated")
        QUERY_DEDUPLICATED = "query.deduplicated", _("query deduplicated")
        MEMORY_FORGOTTEN = "memory.forgotten", _("memory forgotten")
        SCOPE_REFUSED = "scope.refused", _("scope refused")
        EMBEDDING_FAILED = "embedding.failed", _("embedding failed")
        MEMORY_CONSOLIDATED = "memory.consolidated", _("memory consolidated")
        CONSOLIDATION_FAILED = "consolidation.failed", _("consolidation failed")
        RERANK_FAILED = "rerank.failed", _("rerank failed")

    domain = domain_key(null=True, blank=True)
    kind = models.CharField(_("kind"), max_length=32, choices=Kind)
    source = models.CharField(_("source"), max_length=64, blank=True, default="")
    count = models.PositiveIntegerField(_("count"), default=0)
    payload = models.JSONField(_("payload"), default=dict, blank=True)
    actor = models.CharField(_("actor"), max_length=150, blank=True, default="")
    created_at = models.DateTimeField(_("created"), default=timezone.now, db_index=True)

    class Meta(TenantScopedModel.Meta):
        verbose_name = _("observation")
        verbose_name_plural = _("observations")
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["org", "kind", "created_at"], name="memoryhub_obs_kind_idx"),
            models.Index(fields=["domain", "created_at"], name="memoryhub_obs_domain_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.source} ({self.count})"


class ImportJob(TenantScopedModel):
    """A file imported into a knowledge base by an operator, run by a Celery task.

    The file is kept in :class:`ImportChunk` rows until the job ends. A worker validates
    every line first (``parsed``), then writes in batches that each commit with the job's
    progress (``imported``): progress is live, a cancel stops at the next batch, a worker
    that dies resumes where the last batch ended, and an undo erases exactly the records
    this job created (``MemoryRecord.import_job``).
    """

    class Status(models.TextChoices):
        QUEUED = "queued", _("Queued")
        RUNNING = "running", _("Running")
        DONE = "done", _("Done")
        FAILED = "failed", _("Failed")
        CANCELLED = "cancelled", _("Cancelled")
        UNDOING = "undoing", _("Being undone")
        UNDONE = "undone", _("Undone")

    class Format(models.TextChoices):
        JSONL = "jsonl", _("JSON Lines")
        CSV = "csv", _("CSV")
        MARKDOWN = "markdown", _("Markdown")

    knowledge_base = TenantForeignKey(
        KnowledgeBase,
        on_delete=models.CASCADE,
        related_name="import_jobs",
        verbose_name=_("knowledge base"),
        db_constraint=False,  # a key with org_id in it: distribution.TENANT_KEYS
    )
    filename = models.CharField(_("file name"), max_length=255)
    format = models.CharField(_("format"), max_length=8, choices=Format)
    namespace = models.CharField(_("namespace"), max_length=200, blank=True, default="")
    status = models.CharField(_("status"), max_length=16, choices=Status, default=Status.QUEUED)
    size = models.PositiveBigIntegerField(_("bytes"), default=0)
    #: Lines validated so far; ``total`` is known once they all are (``validated``).
    parsed = models.PositiveIntegerField(_("validated"), default=0)
    validated = models.BooleanField(_("validated"), default=False)
    total = models.PositiveIntegerField(_("items"), default=0)
    imported = models.PositiveIntegerField(_("imported"), default=0)
    #: The namespaces the file writes (from validation; null: not known yet, or too many).
    namespaces = models.JSONField(_("namespaces"), null=True, blank=True, editable=False)
    #: The erasure receipt of the job's undo.
    receipt = models.CharField(_("undo receipt"), max_length=36, blank=True, default="")
    errors = models.JSONField(_("errors"), default=dict, blank=True)
    actor = models.CharField(_("actor"), max_length=150, blank=True, default="")
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    started_at = models.DateTimeField(_("started"), null=True, blank=True)
    #: When a worker last moved the job on (the sweeper re-sends jobs that stopped).
    updated_at = models.DateTimeField(_("updated"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)

    FINISHED = (Status.DONE, Status.FAILED, Status.CANCELLED, Status.UNDONE)

    class Meta(TenantScopedModel.Meta):
        verbose_name = _("import")
        verbose_name_plural = _("imports")
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.filename} → {self.knowledge_base_id} ({self.status})"


class ImportChunk(models.Model):
    """A piece (about a megabyte, whole lines) of an import's file, in file order.

    The file lives in the database rather than on a disk the web server and the workers
    would have to share; a worker streams it chunk by chunk, so memory stays bounded
    whatever the file's size. Deleted when the job ends.
    """

    #: The job's org: the chunk's place in a cluster distributed by org.
    org = org_key(db_index=False)
    job = TenantForeignKey(
        ImportJob,
        on_delete=models.CASCADE,
        related_name="chunks",
        db_constraint=False,  # a key with org_id in it: distribution.TENANT_KEYS
    )
    seq = models.PositiveIntegerField()
    text = models.TextField()

    class Meta:
        verbose_name = _("import chunk")
        constraints = [
            models.UniqueConstraint(fields=["job", "seq", "org"], name="memoryhub_import_chunk_seq")
        ]

    def __str__(self) -> str:
        return f"chunk {self.seq} of import {self.job_id}"


class IdempotentRequest(TenantScopedModel):
    """The answer to a write, update or forget sent with an ``Idempotency-Key`` header,
    kept for its retries (``services.idempotency``): a retry with the same key gets
    this answer again instead of acting twice.

    Stored in the transaction that acted, so an answer exists exactly when the action
    committed. Kept ``IDEMPOTENCY_TTL`` seconds (the sweeper deletes older ones); an
    update's answer holds the record's content, so every erasure in the domain deletes
    the domain's answers.
    """

    #: Who sent it: an API key (``key:<prefix>``) or a staff user (``user:<id>``).
    sender = models.CharField(_("sender"), max_length=64)
    idempotency_key = models.CharField(_("idempotency key"), max_length=255)
    #: sha256 of the method, path and body: the same key with another request is refused.
    fingerprint = models.CharField(_("request fingerprint"), max_length=64)
    status = models.PositiveSmallIntegerField(_("status"))
    answer = models.JSONField(_("answer"))
    created_at = models.DateTimeField(_("created"), default=timezone.now, db_index=True)

    class Meta(TenantScopedModel.Meta):
        verbose_name = _("idempotent request")
        verbose_name_plural = _("idempotent requests")
        constraints = [
            models.UniqueConstraint(
                fields=["sender", "idempotency_key", "org"], name="memoryhub_idempotency_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"idempotent request {self.pk} ({self.status})"


class WorkerHeartbeat(models.Model):
    """The last time each Celery worker said it was alive (``memoryhub.worker``).

    Not tenant data: one row per worker host name, read by the health endpoint and by
    the sweeper (which records a live worker still holds).
    """

    hostname = models.CharField(_("host name"), max_length=255, unique=True)
    seen_at = models.DateTimeField(_("last seen"))
    #: Ids of the records in the indexing tasks the worker held at ``seen_at`` (running,
    #: prefetched, or waiting to be retried); null when it could not tell.
    holding = models.JSONField(_("records held"), null=True, blank=True, editable=False)

    class Meta:
        verbose_name = _("worker heartbeat")
        verbose_name_plural = _("worker heartbeats")

    def __str__(self) -> str:
        return f"{self.hostname} at {self.seen_at:%Y-%m-%d %H:%M:%S}"


class ErasureReceipt(TenantScopedModel):
    """The permanent proof of one erasure: when, by whom, where, what selector (as a keyed
    hash), and how many records per knowledge base. Never the content or the namespace.

    The org and domain are kept as plain ids and slugs, not foreign keys, so a receipt
    outlives the org or domain it speaks of; receipts are exempt from retention.
    """

    org = None
    domain = None
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_at = models.DateTimeField(_("erased at"), default=timezone.now, db_index=True)
    actor = models.CharField(_("actor"), max_length=150, blank=True, default="")
    org_id = models.BigIntegerField(_("org id"))
    org_slug = models.CharField(_("org"), max_length=64)
    domain_id = models.BigIntegerField(_("domain id"))
    domain_slug = models.CharField(_("domain"), max_length=64)
    #: One operator action (an org's erasure, a subject across domains) shares a batch.
    batch = models.UUIDField(_("batch"), default=uuid.uuid4, db_index=True)
    selector = models.JSONField(_("selector"), default=dict)
    by_source = models.JSONField(_("records erased per knowledge base"), default=dict)
    deleted = models.PositiveIntegerField(_("records erased"), default=0)
    cancelled_imports = models.PositiveIntegerField(_("imports cancelled"), default=0)

    class Meta(TenantScopedModel.Meta):
        verbose_name = _("erasure receipt")
        verbose_name_plural = _("erasure receipts")
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["org_id", "domain_id", "created_at"], name="memoryhub_receipt_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"erasure {str(self.id)[:8]} in {self.org_slug}/{self.domain_slug}"

    def as_json(self) -> dict[str, object]:
        """What the API and the admin's download give: nothing that names the subject."""
        return {
            "id": str(self.id),
            "erased_at": self.created_at.isoformat(),
            "actor": self.actor,
            "org": self.org_slug,
            "domain": self.domain_slug,
            "selector": self.selector,
            "by_source": self.by_source,
            "deleted": self.deleted,
            "cancelled_imports": self.cancelled_imports,
        }


class WordStatistics(TenantScopedModel):
    """When a large domain's words were last counted (``services.word_statistics``), and
    how many records it held then: the sweeper counts them again once the domain has
    grown or shrunk by a tenth since."""

    records = models.PositiveIntegerField(_("records counted"))
    counted_at = models.DateTimeField(_("counted at"), default=timezone.now)

    class Meta(TenantScopedModel.Meta):
        verbose_name = _("word statistics")
        verbose_name_plural = _("word statistics")
        constraints = [
            models.UniqueConstraint(
                fields=["domain", "org"], name="memoryhub_wordstats_domain_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"word statistics of domain {self.domain_id} ({self.records} records)"


class WordFrequency(TenantScopedModel):
    """How many of a large domain's records hold one of its common words (a lexeme of the
    search configuration, in at least ``COMMON_WORD_RECORDS`` records when counted).

    The keyword leg reads them to rank only the records holding a query's rarest words
    (``services.word_statistics``). Rare words are never stored; every erasure in the
    domain deletes its counts, which the sweeper makes again from what remains.
    """

    lexeme = models.TextField(_("word"))
    records = models.PositiveIntegerField(_("records holding it"))

    class Meta(TenantScopedModel.Meta):
        verbose_name = _("word frequency")
        verbose_name_plural = _("word frequencies")
        constraints = [
            models.UniqueConstraint(
                fields=["domain", "lexeme", "org"], name="memoryhub_wordfreq_domain_lexeme_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.lexeme!r} in {self.records} records"
