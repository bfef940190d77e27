"""Memory records and their versions (history)."""

from __future__ import annotations

import uuid
from datetime import datetime

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Collate, Length
from django.db.models.lookups import GreaterThanOrEqual, LessThan, LessThanOrEqual
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from pgvector.django import VectorField

from .expressions import SESSION_MAX_LENGTH, live_q, occurred, session
from .knowledge_bases import KnowledgeBase
from .tenancy import TenantForeignKey, TenantScopedModel, domain_key, org_key, scoped_manager
from .text import content_hash, search_vector


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
    #: (``services/vector_indexes/``).
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
            # vector queries (services/vector_indexes/).
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
