"""The request vocabulary: each request a door accepts, declared once.

A write (and its item, which is also an import's line), an update by id, a query and a
forget are each one DRF serializer here, the only place that names their fields, types,
choices, help texts and bounds. Everything else is read from them:

* the REST API's OpenAPI document (drf-spectacular describes the serializers);
* the MCP tools' input schemas (``memoryhub.mcp.tools`` maps the fields to JSON Schema);
* the fields the services accept (:func:`field_names`) and the bounds they enforce
  (:func:`bounds`, which the serializers read too).

Bounds that are ``MEMORYHUB`` settings are read each time a serializer's fields are
built (``get_fields``), never at import, so every door states and enforces what the
operator set. The services check the values themselves, with the messages and codes of
the error contract: the serializers declare, they are not what validates a request.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache

from rest_framework import serializers

from .conf import MAX_HALF_LIFE_SECONDS, memoryhub_settings
from .filters import OPERATORS
from .models import MemoryRecord

__all__ = [
    "FORMATS",
    "MAX_FILTER_VALUES",
    "MAX_NAMESPACE_PAGE",
    "MAX_TTL_SECONDS",
    "MODES",
    "Bounds",
    "ForgetRequestSerializer",
    "ImportLineSerializer",
    "ItemInSerializer",
    "NamespaceListSerializer",
    "QueryRequestSerializer",
    "RecordUpdateSerializer",
    "WriteRequestSerializer",
    "bounds",
    "field_names",
]

#: The search modes of a query.
MODES = ("vector", "keyword", "hybrid")
#: The shapes of a REST query's answer.
FORMATS = ("items", "grounding")
#: How many values a query's list filter (sources, namespaces, kinds, tags) may name.
MAX_FILTER_VALUES = 50
#: The longest value of a query's list filter.
MAX_FILTER_VALUE_LENGTH = 255
#: The longest knowledge base name a forget may name.
MAX_SOURCE_NAME_LENGTH = 64
#: The most rows one page of a domain's namespace listing holds (and the most index
#: seeks it costs).
MAX_NAMESPACE_PAGE = 1000
#: The largest token budget (``max_tokens``) a query may ask for.
MAX_TOKENS = 1_000_000
#: ``ttl_seconds`` may not exceed ten years.
MAX_TTL_SECONDS = 10 * 365 * 24 * 3600

#: What ``occurred_at`` means, wherever an item is written.
OCCURRED_HELP = (
    "When what it says happened or was said (ISO 8601 with a time zone, or a date alone: "
    "its start in UTC); absent or null: when the record was created. "
    'A conversation turn names its session in metadata["session"].'
)


class MomentField(serializers.DateTimeField):
    """A moment: an ISO 8601 date-time with a time zone, or a date alone (its start in
    UTC)."""


class BoundedSerializer(serializers.Serializer):
    """A serializer some of whose fields take their bounds from the settings: those
    fields are :meth:`bounded_fields`, built whenever the serializer's fields are."""

    def bounded_fields(self) -> dict[str, serializers.Field]:
        return {}

    def get_fields(self) -> dict[str, serializers.Field]:
        return {**super().get_fields(), **self.bounded_fields()}


@dataclass(frozen=True, slots=True)
class Bounds:
    """The ``MEMORYHUB`` settings that bound the requests' fields, as they are now: what
    the serializers state and the services enforce (:func:`bounds`)."""

    MAX_WRITE_ITEMS: int
    MAX_CONTENT_LENGTH: int
    MAX_KEY_LENGTH: int
    MAX_NAMESPACE_LENGTH: int
    MAX_METADATA_BYTES: int
    MAX_TAGS: int
    MAX_TAG_LENGTH: int
    MAX_QUERY_LENGTH: int
    MAX_K: int
    DEFAULT_K: int
    MAX_CONTEXT_TURNS: int


def bounds() -> Bounds:
    """The :class:`Bounds` the settings give now (read on each call, never cached)."""
    return Bounds(*(getattr(memoryhub_settings, name) for name in _BOUND_SETTINGS))


_BOUND_SETTINGS = tuple(bound.name for bound in fields(Bounds))


def _item_bounds(*, content_required: bool) -> dict[str, serializers.Field]:
    limits = bounds()
    return {
        "content": serializers.CharField(
            max_length=limits.MAX_CONTENT_LENGTH, required=content_required
        ),
        "key": serializers.CharField(
            required=False,
            allow_null=True,
            max_length=limits.MAX_KEY_LENGTH,
            help_text="Upsert by key: a write with the same key (in the same knowledge base "
            "and namespace) replaces the record.",
        ),
        "tags": serializers.ListField(
            child=serializers.CharField(max_length=limits.MAX_TAG_LENGTH),
            required=False,
            max_length=limits.MAX_TAGS,
        ),
    }


class ItemFieldsSerializer(BoundedSerializer):
    """The fields of a memory item, as a write and an update take them."""

    kind = serializers.ChoiceField(choices=MemoryRecord.Kind.choices, required=False)
    metadata = serializers.DictField(
        required=False, help_text="JSON, filterable with a query's where."
    )
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    ttl_seconds = serializers.IntegerField(required=False, min_value=1, max_value=MAX_TTL_SECONDS)
    occurred_at = MomentField(required=False, allow_null=True, help_text=OCCURRED_HELP)
    valid_from = MomentField(
        required=False,
        allow_null=True,
        help_text="When what it says became true; absent or null: when it occurred. A query "
        "reads what is valid now, or at its as_of.",
    )
    valid_until = MomentField(
        required=False,
        allow_null=True,
        help_text="When it stopped being true (exclusive); absent or null: still true. "
        "Setting it closes a fact without a successor.",
    )


class ItemInSerializer(ItemFieldsSerializer):
    """One memory item of a write (and one line of an import)."""

    supersede = serializers.BooleanField(
        required=False,
        default=False,
        help_text="With a key: when the record holding the key says something else, it is "
        "closed at this item's valid_from (default its occurred_at, else now) and kept, "
        "linked to the new record, which takes the key (a change in the world, not a "
        "correction).",
    )

    def bounded_fields(self) -> dict[str, serializers.Field]:
        return {
            **_item_bounds(content_required=True),
            "namespace": serializers.CharField(
                required=False,
                allow_blank=True,
                max_length=bounds().MAX_NAMESPACE_LENGTH,
                help_text='A data subject ("user:alice"); "" (the default) is shared.',
            ),
        }


#: An import's line (a JSON Lines object, a CSV row) is a write's item.
ImportLineSerializer = ItemInSerializer


class RecordUpdateSerializer(ItemFieldsSerializer):
    """The fields an update by id may change: a record's namespace and knowledge base
    stay."""

    def bounded_fields(self) -> dict[str, serializers.Field]:
        return _item_bounds(content_required=False)


class WriteRequestSerializer(BoundedSerializer):
    """A write: items for one knowledge base (source) or several (sources)."""

    source = serializers.CharField(required=False, help_text="One knowledge base (default memory).")  # type: ignore[assignment]
    sources = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="Several knowledge bases (instead of source).",
    )
    items = ItemInSerializer(many=True)  # bounded: bounded_fields
    consolidate = serializers.BooleanField(
        required=False,
        help_text="Consolidate the episodic items into semantic facts once indexed "
        "(also on when the knowledge base's consolidate flag is).",
    )

    def bounded_fields(self) -> dict[str, serializers.Field]:
        items = ItemInSerializer(many=True, max_length=bounds().MAX_WRITE_ITEMS)  # type: ignore[call-arg]
        return {"items": items}


def _filter(help_text: str) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.CharField(max_length=MAX_FILTER_VALUE_LENGTH, allow_blank=True),
        required=False,
        max_length=MAX_FILTER_VALUES,
        help_text=help_text,
    )


class QueryRequestSerializer(BoundedSerializer):
    """A query: the text, how many items, the search mode, filters, and what to return."""

    sources = _filter("Knowledge bases to search (default: all of the domain's).")
    namespaces = _filter(
        'Namespaces to search (default [""], the shared one); add "user:alice" for a data '
        "subject's own memory."
    )
    kinds = serializers.ListField(
        child=serializers.ChoiceField(choices=MemoryRecord.Kind.choices),
        required=False,
        max_length=MAX_FILTER_VALUES,
    )
    tags = _filter("Only records with all of these tags.")
    where = serializers.DictField(
        required=False,
        help_text='A metadata filter in the where language: {"team": "billing"}, '
        f'{{"price": {{"$lt": 10}}}}; {", ".join(["$and", "$or", *sorted(OPERATORS)])}.',
    )
    mode = serializers.ChoiceField(choices=MODES, required=False, default="hybrid")
    min_score = serializers.FloatField(
        required=False,
        min_value=-1,
        max_value=1,
        help_text="The least score in the mode's scale (applied before any reranking).",
    )
    occurred_after = MomentField(
        required=False,
        allow_null=True,
        help_text="Only records that occurred at this moment or later (occurred_at, else "
        "created_at). ISO 8601 with a time zone, or a date alone: its start in UTC.",
    )
    occurred_before = MomentField(
        required=False,
        allow_null=True,
        help_text="Only records that occurred before this moment (exclusive); as "
        "occurred_after. 2025-03-01 to 2025-03-02 selects 1 March (UTC).",
    )
    as_of = MomentField(
        required=False,
        allow_null=True,
        help_text="Read memory as it was at this moment: records valid then (valid_from, "
        "else when they occurred, at or before it; valid_until after it). Absent or null: "
        "what is valid now. ISO 8601 with a time zone, or a date alone: its start in UTC.",
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
        default=True,
        help_text="false keeps the fused order when the site has a reranker.",
    )
    format = serializers.ChoiceField(choices=FORMATS, required=False)
    explain = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Return each item's rank and score in the vector and keyword legs "
        "(`legs`); an explained query is not answered from the cache.",
    )

    def bounded_fields(self) -> dict[str, serializers.Field]:
        limits = bounds()
        return {
            "query": serializers.CharField(max_length=limits.MAX_QUERY_LENGTH),
            "key_prefix": serializers.CharField(
                required=False,
                allow_blank=True,
                max_length=limits.MAX_KEY_LENGTH,
                help_text='Only records whose key starts with this; "" selects the '
                "records that have a key.",
            ),
            "k": serializers.IntegerField(
                required=False, min_value=1, max_value=limits.MAX_K, default=limits.DEFAULT_K
            ),
            "context_turns": serializers.IntegerField(
                required=False,
                min_value=0,
                max_value=limits.MAX_CONTEXT_TURNS,
                help_text="Return each hit's neighbouring turns of its session "
                '(metadata["session"]): up to this many before and after it (default 0).',
            ),
            "max_tokens": serializers.IntegerField(
                required=False,
                allow_null=True,
                min_value=1,
                max_value=MAX_TOKENS,
                help_text="A budget for what the agent reads: the best hits of the k that "
                "fit, then their context turns (nearest first), so the grounding holds at "
                "most this many tokens (estimated: 4 characters a token). usage says what "
                "was left out.",
            ),
        }


class ForgetRequestSerializer(serializers.Serializer):
    """A forget: a data subject's namespace, a key, knowledge bases, or the whole
    domain."""

    namespace = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text='A data subject ("user:alice"): erases their memory in every knowledge '
        "base of this domain, read-only ones included (another domain's is erased by a "
        'request there). The shared namespace "" needs sources.',
    )
    key = serializers.CharField(required=False)
    source = serializers.CharField(required=False, help_text="One knowledge base.")  # type: ignore[assignment]
    sources = serializers.ListField(
        child=serializers.CharField(max_length=MAX_SOURCE_NAME_LENGTH),
        required=False,
        help_text="Several knowledge bases (instead of source).",
    )
    all = serializers.BooleanField(required=False, help_text="Erase the whole domain.")


class NamespaceListSerializer(BoundedSerializer):
    """A listing of a knowledge base's namespaces (query parameters): the distinct
    namespaces, or with ``delimiter`` the distinct (namespace, key up to the delimiter)
    pairs of its keyed records, in code point order, one index seek per row."""

    source = serializers.CharField(  # type: ignore[assignment]
        required=False, help_text="The knowledge base (default memory)."
    )
    delimiter = serializers.CharField(
        required=False,
        min_length=1,
        max_length=1,
        help_text="Group keyed records by their key up to and including the first "
        "delimiter after key_prefix (the key's directory); keys without it are skipped.",
    )
    cursor = serializers.CharField(
        required=False, help_text="The next page: the previous page's next."
    )
    limit = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_NAMESPACE_PAGE,
        default=100,
        help_text="The most rows of the page (a page may hold fewer and still have a "
        "next: each key without the delimiter costs a row's seek).",
    )

    def bounded_fields(self) -> dict[str, serializers.Field]:
        limits = bounds()
        return {
            "prefix": serializers.CharField(
                required=False,
                allow_blank=True,
                max_length=limits.MAX_NAMESPACE_LENGTH,
                help_text="Only namespaces that start with this.",
            ),
            "namespace": serializers.CharField(
                required=False,
                allow_blank=True,
                max_length=limits.MAX_NAMESPACE_LENGTH,
                help_text="Only this namespace (with delimiter: its key directories).",
            ),
            "key_prefix": serializers.CharField(
                required=False,
                allow_blank=True,
                max_length=limits.MAX_KEY_LENGTH,
                help_text="With delimiter and namespace: only keys that start with this.",
            ),
        }


@cache
def field_names(declaration: type[serializers.Serializer]) -> frozenset[str]:
    """The fields ``declaration`` names (the same whatever the settings bound)."""
    return frozenset(declaration().fields)
