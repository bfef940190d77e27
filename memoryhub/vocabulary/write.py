"""A write and its item (which is also an import's line), and an update by id."""

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Annotated, Any, ClassVar, Self

from django.utils import timezone
from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from ..filters import MAX_INDEXED_VALUE_BYTES
from ..models import SESSION_KEY, SESSION_MAX_LENGTH, MemoryRecord
from . import rules
from .base import Request
from .bounds import bounds, current
from .rules import EXPIRY_RANGE, Refused, Rule

__all__ = [
    "MAX_TTL_SECONDS",
    "OCCURRED_HELP",
    "ItemFields",
    "RecordUpdate",
    "WriteBody",
    "WriteItem",
    "items_of",
]

#: ``ttl_seconds`` may not exceed ten years.
MAX_TTL_SECONDS = 10 * 365 * 24 * 3600
#: How deep an item's metadata may nest.
MAX_METADATA_DEPTH = 20

KINDS = tuple(MemoryRecord.Kind.values)
KIND_LABELS = [(value, str(label)) for value, label in MemoryRecord.Kind.choices]

#: What ``occurred_at`` means, wherever an item is written.
OCCURRED_HELP = (
    "When what it says happened or was said (ISO 8601 with a time zone, or a date alone: "
    "its start in UTC); absent or null: when the record was created. "
    'A conversation turn names its session in metadata["session"].'
)

# --- an item ---------------------------------------------------------------------------


def _session(metadata: Mapping[str, Any]) -> dict[str, list[str]]:
    """``metadata["session"]``, when given, names a conversation: a short string or an
    integer (the turns index holds it)."""
    if SESSION_KEY not in metadata:
        return {}
    value = metadata[SESSION_KEY]
    text = value if isinstance(value, str) else None
    if rules.is_integer(value) and abs(value) < 10**SESSION_MAX_LENGTH:
        text = str(value)
    if text is None or not text.strip():
        return {f".{SESSION_KEY}": ["names a conversation: a non-blank string or an integer."]}
    if len(text) > SESSION_MAX_LENGTH:
        return {f".{SESSION_KEY}": [f"is longer than {SESSION_MAX_LENGTH} characters."]}
    return {}


def _indexed_values(metadata: Mapping[str, Any]) -> dict[str, list[str]]:
    """The value of a key in ``INDEXED_METADATA_KEYS`` is an entry of its btree index,
    which holds at most about 2.7 kB: larger ones are refused here, not by the index."""
    import json

    from ..conf import memoryhub_settings

    errors: dict[str, list[str]] = {}
    for key in memoryhub_settings.INDEXED_METADATA_KEYS or ():
        if key not in metadata:
            continue
        size = len(json.dumps(metadata[key], ensure_ascii=False).encode("utf-8"))
        if size > MAX_INDEXED_VALUE_BYTES:
            errors[f".{key}"] = [
                f"is {size} bytes of JSON; an indexed key's value is at most"
                f" {MAX_INDEXED_VALUE_BYTES} (INDEXED_METADATA_KEYS)."
            ]
    return errors


KEY = rules.text(
    "MAX_KEY_LENGTH",
    name=True,
    nullable=True,
    help="Upsert by key: a write with the same key (in the same knowledge base and "
    "namespace) replaces the record.",
)
TAGS = rules.texts(rules.text("MAX_TAG_LENGTH", name=True), most="MAX_TAGS", noun="tags", null=())
METADATA = rules.json_object(
    max_depth=MAX_METADATA_DEPTH,
    max_bytes="MAX_METADATA_BYTES",
    checks=(_session, _indexed_values),
    nullable=True,
    null={},
    states_null=False,
    help="JSON, filterable with a query's where.",
)
EXPIRES_AT = rules.moment(EXPIRY_RANGE, dates=False)
TTL_SECONDS = rules.integer(1, MAX_TTL_SECONDS, nullable=True, states_null=False)
OCCURRED_AT = rules.moment(help=OCCURRED_HELP)
VALID_FROM = rules.moment(
    help="When what it says became true; absent or null: when it occurred. A query reads "
    "what is valid now, or at its as_of."
)
VALID_UNTIL = rules.moment(
    help="When it stopped being true (exclusive); absent or null: still true. Setting it "
    "closes a fact without a successor."
)


class ItemFields(Request):
    """The fields of a memory item that an update by id may change too."""

    unknown: ClassVar[str] = "is not a field of a memory item."

    kind: Annotated[str, rules.choice(KINDS, labels=KIND_LABELS)] = MemoryRecord.Kind.SEMANTIC
    metadata: Annotated[dict[str, Any], METADATA] = Field(default_factory=dict)
    expires_at: Annotated[datetime | None, EXPIRES_AT] = None
    ttl_seconds: Annotated[int | None, TTL_SECONDS] = Field(default=None, exclude=True)
    occurred_at: Annotated[datetime | None, OCCURRED_AT] = None
    valid_from: Annotated[datetime | None, VALID_FROM] = None
    valid_until: Annotated[datetime | None, VALID_UNTIL] = None
    key: Annotated[str | None, KEY] = None
    tags: Annotated[tuple[str, ...], TAGS] = ()


class RecordUpdate(ItemFields):
    """The fields an update by id may change (all optional): a record's namespace and
    knowledge base stay."""

    content: Annotated[str | None, rules.text("MAX_CONTENT_LENGTH")] = None


class WriteItem(ItemFields):
    """One memory item of a write (and one line of an import).

    Valid, it is the command the write service takes; ``ttl_seconds`` is answered as
    ``expires_at``."""

    schema_name: ClassVar[str] = "ItemIn"

    content: Annotated[str, rules.text("MAX_CONTENT_LENGTH")]
    namespace: Annotated[
        str,
        rules.text(
            "MAX_NAMESPACE_LENGTH",
            blank=True,
            name=True,
            nullable=True,
            null="",
            states_null=False,
            help='A data subject ("user:alice"); "" (the default) is shared.',
        ),
    ] = ""
    #: Close the current record of ``key`` (when it says something else) instead of
    #: overwriting it: services/supersession.py.
    supersede: Annotated[
        bool,
        rules.flag(
            help="With a key: when the record holding the key says something else, it is "
            "closed at this item's valid_from (default its occurred_at, else now) and "
            "kept, linked to the new record, which takes the key (a change in the world, "
            "not a correction)."
        ),
    ] = False

    @model_validator(mode="after")
    def _across_fields(self) -> Self:
        errors: dict[str, list[str]] = {}
        if self.ttl_seconds is not None:
            # An item already valid (passed on to another check) keeps its expiry.
            if self.expires_at is not None and "expires_at" in self.model_fields_set:
                errors[".ttl_seconds"] = ["give either expires_at or ttl_seconds, not both."]
            elif self.expires_at is None:
                expires_at = timezone.now() + timedelta(seconds=self.ttl_seconds)
                self.__dict__["expires_at"] = expires_at
        if self.valid_from and self.valid_until and self.valid_until <= self.valid_from:
            errors[".valid_until"] = ["must be later than valid_from."]
        if self.supersede and self.key is None:
            errors[".supersede"] = [
                "needs a key: the record it supersedes is the one holding the key."
            ]
        if errors:
            raise Refused(errors).pydantic()
        return self

    @property
    def content_hash(self) -> str:
        from ..models import content_hash

        return content_hash(self.content)


def _a_batch(items: Any) -> Any:
    if not isinstance(items, list | tuple):
        raise Refused("must be a list.").pydantic()
    most = current().MAX_WRITE_ITEMS
    if len(items) > most:
        raise Refused(f"at most {most} items per write.").pydantic()
    return items


def _keys_once(items: list[WriteItem]) -> tuple[WriteItem, ...]:
    """A key names one item of a namespace in a batch."""
    first: dict[tuple[str, str], int] = {}
    errors: dict[str, list[str]] = {}
    for index, item in enumerate(items):
        if item.key is None:
            continue
        seen = first.setdefault((item.namespace, item.key), index)
        if seen != index:
            errors[f"[{index}].key"] = [f"repeats the key of items[{seen}] in the same namespace."]
    if errors:
        raise Refused(errors).pydantic()
    return tuple(items)


#: A write's items: at most ``MAX_WRITE_ITEMS``, each key once per namespace.
Items = Annotated[
    tuple[WriteItem, ...],
    BeforeValidator(_a_batch),
    AfterValidator(_keys_once),
    Field(json_schema_extra=lambda schema: schema.update(maxItems=bounds().MAX_WRITE_ITEMS)),
]


class _Batch(Request):
    items: Items


def items_of(raw: Any) -> list[WriteItem]:
    """A batch of raw items (mappings, or items already valid) as valid items; else
    :class:`ValidationFailed` naming every bad field (``items[2].tags``)."""
    return list(_Batch.parse({"items": raw}).items)


# --- a write ---------------------------------------------------------------------------


def _source_name(value: Any) -> str:
    if not isinstance(value, str):
        raise Refused("must be a knowledge base name.")
    return value


class WriteBody(Request):
    """A write: items for one knowledge base (source) or several (sources)."""

    schema_name: ClassVar[str] = "WriteRequest"

    unknown: ClassVar[str] = "is not a field of a write."

    source: Annotated[
        str | None,
        Rule(
            _source_name,
            lambda: {"type": "string", "minLength": 1},
            "One knowledge base (default memory).",
        ),
    ] = None
    sources: Annotated[
        Any,
        Rule(
            lambda value: value,
            lambda: {"type": "array", "items": {"type": "string", "minLength": 1}},
            "Several knowledge bases (instead of source).",
        ),
    ] = None
    items: Items
    consolidate: Annotated[
        bool,
        rules.flag(
            help="Consolidate the episodic items into semantic facts once indexed (also on "
            "when the knowledge base's consolidate flag is)."
        ),
    ] = False

    @model_validator(mode="after")
    def _one_of_source_and_sources(self) -> Self:
        if {"source", "sources"} <= self.model_fields_set:
            raise Refused({".sources": ["give source or sources, not both."]}).pydantic()
        return self

    @property
    def named_sources(self) -> Any:
        """The knowledge bases named (None: the default one)."""
        return [self.source] if "source" in self.model_fields_set else self.sources
