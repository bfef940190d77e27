"""Response shapes of the REST API, for the OpenAPI schema and for output.

The requests are declared once, for every door, in ``memoryhub.vocabulary``; input
validation is the services' job (one set of rules for every front door).
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ..models import KnowledgeBase, MemoryRecord, RecordVersion
from ..services.forget import ForgetResult
from ..services.query import QueryResult, render_grounding


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
    valid_from = serializers.DateTimeField(
        allow_null=True, help_text="When it became true (null: when it occurred)."
    )
    valid_until = serializers.DateTimeField(
        allow_null=True, help_text="When it stopped being true (null: still true)."
    )
    superseded_by = serializers.UUIDField(
        allow_null=True, help_text="The record that superseded it (null: none)."
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


class UsageSerializer(serializers.Serializer):
    tokens = serializers.IntegerField(
        help_text="Estimated tokens of the grounding (4 characters a token, rounded up)."
    )
    items = serializers.IntegerField(help_text="Hits returned (context turns not counted).")
    records_scanned = serializers.IntegerField(
        help_text="Candidate records the search legs returned and the ranking read."
    )
    max_tokens = serializers.IntegerField(allow_null=True, help_text="The budget asked for.")
    truncated = serializers.BooleanField(
        help_text="true: the budget left hits or context turns out."
    )


class QueryResponseSerializer(serializers.Serializer):
    items = QueryHitSerializer(many=True)
    grounding = serializers.CharField(allow_null=True)
    usage = UsageSerializer()
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
            "valid_from",
            "valid_until",
            "superseded_by",
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
    valid_from = serializers.DateTimeField(allow_null=True)
    valid_until = serializers.DateTimeField(allow_null=True)
    changed_at = serializers.DateTimeField(help_text="When this state came to be.")
    actor = serializers.CharField(help_text="Who made the change that produced it.")
    cause = serializers.ChoiceField(
        choices=RecordVersion.Cause.choices,
        help_text="What produced it: create, upsert (written again by key), update, import, "
        "admin, restore, consolidation or supersede.",
    )


class RecordHistorySerializer(serializers.Serializer):
    record = serializers.UUIDField()
    versions = RecordVersionSerializer(
        many=True, help_text="Newest first; the first is the record's current state."
    )


class TimelineLinkSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    content = serializers.CharField()
    key = serializers.CharField(allow_null=True)
    valid_from = serializers.DateTimeField(
        help_text="When it became true (its valid_from, else when it occurred)."
    )
    valid_until = serializers.DateTimeField(
        allow_null=True, help_text="When it stopped being true (null: still true)."
    )
    superseded_by = serializers.UUIDField(allow_null=True)
    created_at = serializers.DateTimeField()


class TimelineSerializer(serializers.Serializer):
    record = serializers.UUIDField()
    links = TimelineLinkSerializer(
        many=True,
        help_text="The supersession chain the record is in, oldest first (at most 50 "
        "links on each side of it).",
    )


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


def query_result(result: QueryResult) -> dict[str, Any]:
    """A query's answer, as the REST API and the MCP tool give it."""
    return {
        "items": result.item_dicts(),
        "grounding": render_grounding(result.items),
        "reranked": result.reranked,
        "usage": result.usage,
    }


def forget_result(result: ForgetResult) -> dict[str, Any]:
    """A forget's answer, as the REST API and the MCP tool give it."""
    return dict(ForgetResponseSerializer(result).data)
