"""A query, and a listing of a knowledge base's namespaces."""

from datetime import datetime
from typing import Annotated, Any, ClassVar, Self

from pydantic import Field, model_validator

from ..boundary import MAX_NAME_LENGTH
from ..conf import MAX_HALF_LIFE_SECONDS, half_life_seconds
from ..exceptions import ValidationFailed
from ..filters import OPERATORS, compile_where
from . import rules
from .base import Request
from .bounds import bounds, current
from .rules import Refused, Rule
from .write import KIND_LABELS, KINDS

__all__ = [
    "FORMATS",
    "MAX_FILTER_VALUES",
    "MAX_FILTER_VALUE_LENGTH",
    "MAX_NAMESPACE_PAGE",
    "MAX_TOKENS",
    "MODES",
    "NamespaceListing",
    "QueryBody",
]

#: The search modes of a query.
MODES = ("vector", "keyword", "hybrid")
#: The shapes of a REST query's answer.
FORMATS = ("items", "grounding")
#: How many values a query's list filter (sources, namespaces, kinds, tags) may name.
MAX_FILTER_VALUES = 50
#: The longest value of a query's list filter.
MAX_FILTER_VALUE_LENGTH = 255
#: The largest token budget (``max_tokens``) a query may ask for.
MAX_TOKENS = 1_000_000

# --- a query ---------------------------------------------------------------------------


def _query_text(value: Any) -> str:
    most = current().MAX_QUERY_LENGTH
    if not isinstance(value, str) or not value.strip():
        raise Refused("must be a non-empty string.")
    if len(value) > most:
        raise Refused(f"is longer than {most} characters.")
    if "\x00" in value:
        raise Refused("may not contain NUL characters.")
    return value.strip()


def _key_prefix(value: Any) -> str:
    most = current().MAX_KEY_LENGTH
    if not isinstance(value, str) or "\x00" in value or len(value) > most:
        raise Refused(f"must be a string of at most {most} characters.")
    return value


def _where(value: Any) -> dict[str, Any] | None:
    try:
        compile_where(value, path="where")
    except ValidationFailed as exc:
        raise Refused(
            {path.removeprefix("where"): messages for path, messages in exc.errors.items()}
        ) from None
    return value or None


def _half_life(value: Any) -> float:
    try:
        # 0 (no boost) stays 0: it overrides the setting, as None does not.
        return half_life_seconds(value) or 0.0
    except ValueError:
        raise Refused(
            f"must be a number of seconds from 0 (no boost) to {MAX_HALF_LIFE_SECONDS}."
        ) from None


def _filter(help: str = "", *, each: Rule | None = None) -> Rule:
    each = each or rules.filter_value(MAX_FILTER_VALUE_LENGTH)
    return rules.texts(each, most=MAX_FILTER_VALUES, help=help)


class QueryBody(Request):
    """A query: the text, how many items, the search mode, filters, and what to return."""

    schema_name: ClassVar[str] = "QueryRequest"

    unknown: ClassVar[str] = "is not a query field."

    sources: Annotated[
        tuple[str, ...] | None, _filter("Knowledge bases to search (default: all of the domain's).")
    ] = None
    namespaces: Annotated[
        tuple[str, ...] | None,
        _filter(
            'Namespaces to search (default [""], the shared one); add "user:alice" for a '
            "data subject's own memory."
        ),
    ] = None
    kinds: Annotated[
        tuple[str, ...] | None, _filter(each=rules.choice(KINDS, labels=KIND_LABELS))
    ] = None
    tags: Annotated[tuple[str, ...] | None, _filter("Only records with all of these tags.")] = None
    where: Annotated[
        dict[str, Any] | None,
        Rule(
            _where,
            lambda: {"type": "object"},
            'A metadata filter in the where language: {"team": "billing"}, '
            f'{{"price": {{"$lt": 10}}}}; {", ".join(["$and", "$or", *sorted(OPERATORS)])}.',
            nullable=True,
            states_null=False,
        ),
    ] = None
    mode: Annotated[str, rules.choice(MODES)] = "hybrid"
    min_score: Annotated[
        float | None,
        rules.number(
            -1.0,
            1.0,
            message="must be a number from -1 to 1.",
            help="The least score in the mode's scale (applied before any reranking).",
        ),
    ] = None
    occurred_after: Annotated[
        datetime | None,
        rules.moment(
            help="Only records that occurred at this moment or later (occurred_at, else "
            "created_at). ISO 8601 with a time zone, or a date alone: its start in UTC."
        ),
    ] = None
    occurred_before: Annotated[
        datetime | None,
        rules.moment(
            help="Only records that occurred before this moment (exclusive); as "
            "occurred_after. 2025-03-01 to 2025-03-02 selects 1 March (UTC)."
        ),
    ] = None
    as_of: Annotated[
        datetime | None,
        rules.moment(
            help="Read memory as it was at this moment: records valid then (valid_from, else "
            "when they occurred, at or before it; valid_until after it). Absent or null: "
            "what is valid now. ISO 8601 with a time zone, or a date alone: its start in UTC."
        ),
    ] = None
    #: Seconds; None: ``RECENCY_HALF_LIFE``; 0: no recency boost for this query.
    recency_half_life: Annotated[
        float | None,
        Rule(
            _half_life,
            lambda: {"type": "number", "minimum": 0, "maximum": MAX_HALF_LIFE_SECONDS},
            "Recency boost: each score times 0.5^(age / half-life), age in seconds since "
            "the record occurred. Seconds; 0 turns it off; absent or null: the "
            "RECENCY_HALF_LIFE setting (default off).",
            nullable=True,
        ),
    ] = None
    rerank: Annotated[
        bool, rules.flag(help="false keeps the fused order when the site has a reranker.")
    ] = True
    format: Annotated[str | None, rules.choice(FORMATS)] = None
    explain: Annotated[
        bool,
        rules.flag(
            help="Return each item's rank and score in the vector and keyword legs (`legs`); "
            "an explained query is not answered from the cache."
        ),
    ] = False
    query: Annotated[
        str,
        Rule(
            _query_text,
            lambda: {"type": "string", "minLength": 1, "maxLength": bounds().MAX_QUERY_LENGTH},
        ),
    ]
    #: Only records whose key starts with it ("": the records that have a key).
    key_prefix: Annotated[
        str | None,
        Rule(
            _key_prefix,
            lambda: {"type": "string", "maxLength": bounds().MAX_KEY_LENGTH},
            'Only records whose key starts with this; "" selects the records that have a key.',
            nullable=True,
            states_null=False,
        ),
    ] = None
    k: Annotated[int, rules.integer(1, "MAX_K", default="DEFAULT_K")] = Field(
        default_factory=lambda: bounds().DEFAULT_K
    )
    #: Neighbouring turns of each hit's session to return, on each side (0: none).
    context_turns: Annotated[
        int,
        rules.integer(
            0,
            "MAX_CONTEXT_TURNS",
            help="Return each hit's neighbouring turns of its session "
            '(metadata["session"]): up to this many before and after it (default 0).',
        ),
    ] = 0
    #: The most (estimated) tokens the answer's grounding may hold (``budget.pack``).
    max_tokens: Annotated[
        int | None,
        rules.integer(
            1,
            MAX_TOKENS,
            nullable=True,
            help="A budget for what the agent reads: the best hits of the k that fit, then "
            "their context turns (nearest first), so the grounding holds at most this many "
            "tokens (estimated: 4 characters a token). usage says what was left out.",
        ),
    ] = None

    @model_validator(mode="after")
    def _a_period(self) -> Self:
        after, before = self.occurred_after, self.occurred_before
        if after is not None and before is not None and before <= after:
            raise Refused({".occurred_before": ["must be later than occurred_after."]}).pydantic()
        return self


# --- a listing of namespaces -------------------------------------------------------------

#: The most rows one page of a domain's namespace listing holds (and the most index
#: seeks it costs).
MAX_NAMESPACE_PAGE = 1000


def _delimiter(value: Any) -> str:
    # ASCII: the end of a directory's range is the delimiter's successor, a character.
    rules.check_text(value, max_length=1, blank=True)
    if len(value) != 1 or not (value.isascii() and value.isprintable()):
        raise Refused("must be one printable ASCII character.")
    return value


def _page_size(value: Any) -> int:
    if isinstance(value, str) and value.isascii() and value.isdigit():  # a query parameter
        value = int(value)
    if not rules.is_integer(value) or not 1 <= value <= MAX_NAMESPACE_PAGE:
        raise Refused(f"must be an integer from 1 to {MAX_NAMESPACE_PAGE}.")
    return int(value)


def _cursor_length() -> int:
    limits = current()
    return 4 * (limits.MAX_NAMESPACE_LENGTH + limits.MAX_KEY_LENGTH) + 64


def _narrowing(bound: str, help: str) -> Rule:
    """A parameter that narrows the listing (absent: it does not)."""
    return rules.text(bound, blank=True, nullable=True, states_null=False, help=help)


class NamespaceListing(Request):
    """A listing of a knowledge base's namespaces (query parameters): the distinct
    namespaces, or with ``delimiter`` the distinct (namespace, key up to the delimiter)
    pairs of its keyed records, in code point order, one index seek per row."""

    unknown: ClassVar[str] = "is not a parameter of the namespace listing."

    source: Annotated[
        str, rules.text(MAX_NAME_LENGTH, blank=True, help="The knowledge base (default memory).")
    ] = "memory"
    delimiter: Annotated[
        str | None,
        Rule(
            _delimiter,
            lambda: {"type": "string", "minLength": 1, "maxLength": 1},
            "Group keyed records by their key up to and including the first delimiter after "
            "key_prefix (the key's directory); keys without it are skipped.",
            nullable=True,
            states_null=False,
        ),
    ] = None
    cursor: Annotated[
        str | None,
        Rule(
            lambda value: rules.check_text(value, max_length=_cursor_length(), blank=True),
            lambda: {"type": "string"},
            "The next page: the previous page's next.",
            nullable=True,
            states_null=False,
        ),
    ] = None
    limit: Annotated[
        int,
        Rule(
            _page_size,
            lambda: {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_NAMESPACE_PAGE,
                "default": 100,
            },
            "The most rows of the page (a page may hold fewer and still have a next: each "
            "key without the delimiter costs a row's seek).",
        ),
    ] = 100
    prefix: Annotated[
        str | None, _narrowing("MAX_NAMESPACE_LENGTH", "Only namespaces that start with this.")
    ] = None
    namespace: Annotated[
        str | None,
        _narrowing(
            "MAX_NAMESPACE_LENGTH", "Only this namespace (with delimiter: its key directories)."
        ),
    ] = None
    key_prefix: Annotated[
        str | None,
        _narrowing(
            "MAX_KEY_LENGTH", "With delimiter and namespace: only keys that start with this."
        ),
    ] = None

    @model_validator(mode="after")
    def _one_selection(self) -> Self:
        errors: dict[str, list[str]] = {}
        if self.key_prefix is not None and (self.namespace is None or self.delimiter is None):
            errors[".key_prefix"] = ["needs namespace and delimiter."]
        if self.namespace is not None and self.prefix is not None:
            errors[".prefix"] = ["give namespace or prefix, not both."]
        if errors:
            raise Refused(errors).pydantic()
        return self
