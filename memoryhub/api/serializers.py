"""Request and response shapes of the REST API, for the OpenAPI schema and for output.

Input validation is the services' job (one set of rules for every front door); these
serializers describe the bodies and shape responses.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ..conf import MAX_HALF_LIFE_SECONDS, memoryhub_settings
from ..models import KnowledgeBase, MemoryRecord, RecordVersion


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable, machine-readable error code.")
    detail = serializers.CharField()
    errors = serializers.DictField(  # type: ignore[assignment]
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="Field path (items[2].tags, where.$and[1].price.$gte) to messages.",
    )


class WriteRefusedSerializer(serializers.Serializer):
    code = serializers.ChoiceField(choices=["write_refused"])
    detail = serializers.CharField()
    source = serializers.CharField()  # type: ignore[assignment]
    n = serializers.IntegerField()


class SettingsBounds:
    """Fields whose bounds come from ``MEMORYHUB`` settings, read when the serializer is
    used (the OpenAPI schema states the bounds the services enforce, whatever an
    operator set). ``bounded_fields()`` returns them by name."""

    def bounded_fields(self) -> dict[str, serializers.Field]:
        return {}

    def get_fields(self) -> dict[str, serializers.Field]:
        return {**super().get_fields(), **self.bounded_fields()}  # type: ignore[misc]


def _item_bounds(required_content: bool) -> dict[str, serializers.Field]:
    settings = memoryhub_settings
    return {
        "content": serializers.CharField(
            max_length=settings.MAX_CONTENT_LENGTH, required=required_content
        ),
        "key": serializers.CharField(
            required=False, allow_null=True, max_length=settings.MAX_KEY_LENGTH
        ),
        "tags": serializers.ListField(
            child=serializers.CharField(max_length=settings.MAX_TAG_LENGTH),
            required=False,
            max_length=settings.MAX_TAGS,
        ),
    }


#: What ``occurred_at`` means, wherever an item is written.
OCCURRED_HELP = (
    "When what it says happened or was said (ISO 8601 with a time zone, or a date alone: "
    "its start in UTC); absent or null: when the record was created. "
    'A conversation turn names its session in metadata["session"].'
)


# The fields an item is written and updated with; those bounded by settings (content,
# key, tags, namespace) are each serializer's bounded_fields. No docstring: the schema
# describes a serializer by the first one it inherits.
class ItemFieldsSerializer(SettingsBounds, serializers.Serializer):
    kind = serializers.ChoiceField(choices=MemoryRecord.Kind.choices, required=False)
    metadata = serializers.DictField(required=False)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    ttl_seconds = serializers.IntegerField(required=False, min_value=1)
    occurred_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text=OCCURRED_HELP,
    )


class ItemInSerializer(ItemFieldsSerializer):
    def bounded_fields(self) -> dict[str, serializers.Field]:
        return {
            **_item_bounds(required_content=True),
            "namespace": serializers.CharField(
                required=False,
                allow_blank=True,
                max_length=memoryhub_settings.MAX_NAMESPACE_LENGTH,
            ),
        }


class WriteRequestSerializer(serializers.Serializer):
    source = serializers.CharField(required=False, help_text="One knowledge base (default memory).")  # type: ignore[assignment]
    sources = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="Several knowledge bases."
    )
    items = ItemInSerializer(many=True)
    consolidate = serializers.BooleanField(
        required=False,
        help_text="Consolidate the episodic items into semantic facts once indexed "
        "(also on when the knowledge base's consolidate flag is).",
    )


class RecordResultSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    key = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(choices=MemoryRecord.Status.choices)
    deduplicated = serializers.BooleanField()
    source = serializers.CharField()  # type: ignore[assignment]


class WriteResponseSerializer(serializers.Serializer):
    accepted = serializers.ListField(child=serializers.CharField())
    refused = serializers.ListField(child=serializers.CharField())
    failed = serializers.DictField(child=serializers.CharField())
    records = RecordResultSerializer(many=True)
    pending_reason = serializers.ChoiceField(
        choices=["no_worker", "timeout"],
        required=False,
        help_text="With ?wait, why records are still pending: no_worker (no worker has "
        "sent a heartbeat lately, so the request did not wait) or timeout.",
    )


class QueryRequestSerializer(SettingsBounds, serializers.Serializer):
    sources = serializers.ListField(child=serializers.CharField(), required=False)
    namespaces = serializers.ListField(
        child=serializers.CharField(allow_blank=True), required=False
    )
    kinds = serializers.ListField(
        child=serializers.ChoiceField(choices=MemoryRecord.Kind.choices), required=False
    )
    tags = serializers.ListField(child=serializers.CharField(), required=False)
    where = serializers.DictField(required=False, help_text="The where filter language.")
    mode = serializers.ChoiceField(choices=["vector", "keyword", "hybrid"], required=False)
    min_score = serializers.FloatField(
        required=False,
        min_value=-1,
        max_value=1,
        help_text="The least score in the mode's scale (applied before any reranking).",
    )
    occurred_after = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="Only records that occurred at this moment or later (occurred_at, else "
        "created_at). ISO 8601 with a time zone, or a date alone: its start in UTC.",
    )
    occurred_before = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="Only records that occurred before this moment (exclusive); as "
        "occurred_after. 2025-03-01 to 2025-03-02 selects 1 March (UTC).",
    )
    recency_half_life = serializers.FloatField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=MAX_HALF_LIFE_SECONDS,
        help_text="Recency boost: each score times 0.5^(age / half-life), age in seconds "
        "since the record occurred. Seconds; 0 turns it off; absent or null: the "
        "RECENCY_HALF_LIFE setting (default off).",
    )
    rerank = serializers.BooleanField(
        required=False,
        help_text="false keeps the fused order when the site has a reranker (default true).",
    )
    format = serializers.ChoiceField(choices=["items", "grounding"], required=False)
    explain = serializers.BooleanField(
        required=False,
        help_text="Return each item's rank and score in the vector and keyword legs "
        "(`legs`); an explained query is not answered from the cache.",
    )

    def bounded_fields(self) -> dict[str, serializers.Field]:
        settings = memoryhub_settings
        return {
            "query": serializers.CharField(max_length=settings.MAX_QUERY_LENGTH),
            "k": serializers.IntegerField(required=False, min_value=1, max_value=settings.MAX_K),
            "context_turns": serializers.IntegerField(
                required=False,
                min_value=0,
                max_value=settings.MAX_CONTEXT_TURNS,
                help_text="Return each hit's neighbouring turns of its session "
                '(metadata["session"]): up to this many before and after it (default 0).',
            ),
        }


class LegSerializer(serializers.Serializer):
    rank = serializers.IntegerField()
    score = serializers.FloatField()


class LegsSerializer(serializers.Serializer):
    vector = LegSerializer(allow_null=True)
    keyword = LegSerializer(allow_null=True)


class QueryItemSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    content = serializers.CharField()
    source = serializers.CharField()  # type: ignore[assignment]
    score = serializers.FloatField()
    metadata = serializers.DictField()
    key = serializers.CharField(allow_null=True)
    kind = serializers.CharField()
    namespace = serializers.CharField(allow_blank=True)
    tags = serializers.ListField(child=serializers.CharField())
    created_at = serializers.DateTimeField()
    occurred_at = serializers.DateTimeField(
        help_text="When it happened or was said (its occurred_at, else when it was created)."
    )
    derived_from = serializers.ListField(
        child=serializers.UUIDField(),
        help_text="A consolidated fact's sources: the episodic records it came from.",
    )
    dedupe_count = serializers.IntegerField(required=False)
    dedupe_sources = serializers.ListField(child=serializers.CharField(), required=False)
    legs = LegsSerializer(
        required=False,
        help_text="With explain: where the item stood in each leg (null: not found by it).",
    )


class TurnSerializer(QueryItemSerializer):
    score = serializers.FloatField(allow_null=True, help_text="null: a turn is not ranked.")
    dedupe_count = None  # type: ignore[assignment]
    dedupe_sources = None  # type: ignore[assignment]
    legs = None  # type: ignore[assignment]


class TurnsSerializer(serializers.Serializer):
    before = TurnSerializer(many=True, help_text="Up to context_turns earlier turns, oldest first.")
    after = TurnSerializer(many=True, help_text="Up to context_turns later turns, oldest first.")


class QueryHitSerializer(QueryItemSerializer):
    # A field of the response (DRF's metaclass moves it off the class, so the
    # serializer's own ``context`` stays).
    context = TurnsSerializer(  # type: ignore[assignment]
        required=False,
        help_text="With context_turns: the turns of the item's session (metadata.session) "
        "around it, in its knowledge base and namespace; empty lists when it names no "
        "session. Not counted in k.",
    )


class QueryResponseSerializer(serializers.Serializer):
    items = QueryHitSerializer(many=True)
    grounding = serializers.CharField(allow_null=True)
    reranked = serializers.BooleanField(
        help_text="true: the site's reranker ordered the items and each score is its "
        "relevance score (higher is more relevant); false: the mode's order and scores "
        "(no reranker, rerank=false, or the reranker failed)."
    )


class RecordSerializer(serializers.ModelSerializer):
    source = serializers.CharField(source="knowledge_base.name", read_only=True)  # type: ignore[assignment]
    occurred_at = serializers.DateTimeField(
        source="occurred_or_created",
        read_only=True,
        help_text="When it happened or was said (its occurred_at, else when it was created).",
    )

    class Meta:
        model = MemoryRecord
        fields = [
            "id",
            "source",
            "namespace",
            "key",
            "kind",
            "content",
            "metadata",
            "tags",
            "status",
            "embedding_model",
            "last_error",
            "created_at",
            "updated_at",
            "expires_at",
            "occurred_at",
            "derived_from",
        ]
        read_only_fields = fields


class RecordVersionSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    content = serializers.CharField()
    key = serializers.CharField(allow_null=True)
    kind = serializers.ChoiceField(choices=MemoryRecord.Kind.choices)
    tags = serializers.ListField(child=serializers.CharField())
    metadata = serializers.DictField()
    expires_at = serializers.DateTimeField(allow_null=True)
    occurred_at = serializers.DateTimeField(
        help_text="When its content happened (the record's creation time unless set)."
    )
    changed_at = serializers.DateTimeField(help_text="When this state came to be.")
    actor = serializers.CharField(help_text="Who made the change that produced it.")
    cause = serializers.ChoiceField(
        choices=RecordVersion.Cause.choices,
        help_text="What produced it: create, upsert (written again by key), update, import, "
        "admin, restore or consolidation.",
    )


class RecordHistorySerializer(serializers.Serializer):
    record = serializers.UUIDField()
    versions = RecordVersionSerializer(
        many=True, help_text="Newest first; the first is the record's current state."
    )


class RecordUpdateSerializer(ItemFieldsSerializer):
    def bounded_fields(self) -> dict[str, serializers.Field]:
        return _item_bounds(required_content=False)


class ForgetRequestSerializer(serializers.Serializer):
    namespace = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text='A data subject (user:alice). The shared namespace "" needs sources.',
    )
    key = serializers.CharField(required=False)
    source = serializers.CharField(required=False, help_text="One knowledge base.")  # type: ignore[assignment]
    sources = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="Several knowledge bases."
    )
    all = serializers.BooleanField(required=False, help_text="Erase the whole domain.")


class ForgetResponseSerializer(serializers.Serializer):
    deleted = serializers.IntegerField()
    by_source = serializers.DictField(child=serializers.IntegerField())
    refused = serializers.ListField(
        child=serializers.CharField(),
        help_text="Read-only knowledge bases (on_write=ignore) that kept their records.",
    )
    receipt = serializers.UUIDField(
        allow_null=True, help_text="The erasure's permanent receipt (null: nothing erased)."
    )


class ErasureReceiptSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    erased_at = serializers.DateTimeField()
    actor = serializers.CharField()
    org = serializers.CharField()
    domain = serializers.CharField()
    selector = serializers.DictField(
        help_text="all, sources, and namespace/key as HMACs (never in clear), or a record id."
    )
    by_source = serializers.DictField(child=serializers.IntegerField())
    deleted = serializers.IntegerField()
    cancelled_imports = serializers.IntegerField()


class SourceSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    read_only = serializers.BooleanField()  # type: ignore[assignment]
    on_write = serializers.ChoiceField(choices=KnowledgeBase.OnWrite.choices)
    records = serializers.IntegerField()
    refused_writes = serializers.IntegerField()


def record_result(result: Any) -> dict[str, Any]:
    return {
        "id": result.id,
        "key": result.key,
        "status": result.status,
        "deduplicated": result.deduplicated,
        "source": result.source,
    }
