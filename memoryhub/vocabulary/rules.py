"""The rules a request's fields follow, each with the JSON Schema that states it.

A :class:`Rule` is a field's whole check: it takes the value as the client sent it
(parsed JSON, or Python), answers the value the command holds, or raises
:class:`Refused` with the messages of the error contract. Nothing is coerced: ``"5"`` is
not an integer, ``1`` is not ``true``. A rule's bounds that are ``MEMORYHUB`` settings
are read when it checks and when its schema is asked for, never at import.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import PydanticCustomError, core_schema

from .. import boundary
from .bounds import current

__all__ = [
    "EXPIRY_RANGE",
    "OCCURRED_RANGE",
    "Refused",
    "Rule",
    "choice",
    "filter_value",
    "flag",
    "integer",
    "json_object",
    "moment",
    "parse_moment",
    "text",
    "texts",
]

#: The Pydantic error type of a refused value; its context holds the messages by path.
REFUSED = "memoryhub_refused"

#: ``expires_at`` must fall inside this range: every value in it is representable in
#: every time zone, by Python and by PostgreSQL, so no accepted value can break a page.
EXPIRY_RANGE = (
    datetime(2000, 1, 1, tzinfo=UTC),
    datetime(9000, 1, 1, tzinfo=UTC),
)
#: ``occurred_at`` (and a query's ``occurred_after``/``occurred_before``) must fall inside
#: this range: a thousand years back covers any archive, and both ends stay
#: representable in every time zone.
OCCURRED_RANGE = (
    datetime(1000, 1, 1, tzinfo=UTC),
    datetime(9000, 1, 1, tzinfo=UTC),
)

#: A bound: a number, or the name of the ``MEMORYHUB`` setting that gives it.
Bound = int | str


def _limit(bound: Bound) -> int:
    return getattr(current(), bound) if isinstance(bound, str) else bound


class Refused(ValueError):
    """A value refused: messages by path below the field (``""`` the field itself,
    ``".team"``, ``"[2]"``)."""

    def __init__(self, errors: str | Mapping[str, list[str]]) -> None:
        self.errors = {"": [errors]} if isinstance(errors, str) else dict(errors)
        super().__init__(next(iter(self.errors.values()))[0])

    def pydantic(self) -> PydanticCustomError:
        return PydanticCustomError(REFUSED, "{message}", {"message": str(self), "at": self.errors})


@dataclass(frozen=True, eq=False)
class Rule:
    """A field's check and the JSON Schema (2020-12) that states it."""

    check: Callable[[Any], Any]
    schema: Callable[[], dict[str, Any]]
    #: What the field's description says (the OpenAPI document and the MCP tools).
    help: str = ""
    #: Whether null is a value the field takes (it then answers :attr:`null`).
    nullable: bool = False
    null: Any = None
    #: Whether the schema says null is taken (default: :attr:`nullable`).
    states_null: bool | None = None

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        def validate(value: Any) -> Any:
            if value is None and self.nullable:
                return self.null
            try:
                return self.check(value)
            except Refused as refused:
                raise refused.pydantic() from None

        return core_schema.no_info_plain_validator_function(validate)

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        stated = self.schema()
        if self.nullable if self.states_null is None else self.states_null:
            stated["type"] = [stated["type"], "null"]
        if self.help:
            stated["description"] = self.help
        return stated


def check_text(value: Any, *, max_length: int, blank: bool = False, name: bool = False) -> str:
    """``value`` if it is usable text (``boundary.text_problem``). ``name``: it names
    something (a namespace, a key, a tag), so control and invisible format characters are
    refused too."""
    problem = boundary.text_problem(value, max_length=max_length, name=name, blank=blank)
    if problem is not None:
        raise Refused(problem)
    return value


def text(
    bound: Bound,
    *,
    blank: bool = False,
    name: bool = False,
    nullable: bool = False,
    null: Any = None,
    states_null: bool | None = None,
    help: str = "",
) -> Rule:
    """A string of at most ``bound`` characters, without NUL; ``blank``: may be empty or
    white space; ``name``: without control or invisible format characters either;
    ``nullable``: null answers ``null``."""

    def schema() -> dict[str, Any]:
        stated: dict[str, Any] = {"type": "string"}
        if not blank:
            stated["minLength"] = 1
        stated["maxLength"] = _limit(bound)
        return stated

    return Rule(
        lambda value: check_text(value, max_length=_limit(bound), blank=blank, name=name),
        schema,
        help,
        nullable,
        null,
        states_null,
    )


def texts(
    each: Rule, *, most: Bound, noun: str = "values", null: Any = None, help: str = ""
) -> Rule:
    """A list of at most ``most`` values, each as ``each`` checks it, answered as a tuple
    without repeats, in order; null answers ``null``."""

    def check(value: Any) -> tuple[Any, ...]:
        if isinstance(value, str) or not isinstance(value, list | tuple):
            raise Refused("must be a list of strings.")
        if len(value) > _limit(most):
            raise Refused(f"at most {_limit(most)} {noun}.")
        errors: dict[str, list[str]] = {}
        result: dict[Any, None] = {}
        for index, item in enumerate(value):
            try:
                result[each.check(item)] = None
            except Refused as refused:
                errors[f"[{index}]"] = refused.errors[""]
        if errors:
            raise Refused(errors)
        return tuple(result)

    def schema() -> dict[str, Any]:
        return {"type": "array", "items": each.schema(), "maxItems": _limit(most)}

    return Rule(check, schema, help, nullable=True, null=null, states_null=False)


def filter_value(max_length: int) -> Rule:
    """A value a query's list filter names (a knowledge base, a namespace, a tag)."""

    def check(value: Any) -> str:
        if not isinstance(value, str):
            raise Refused("must be a string.")
        if "\x00" in value:
            raise Refused("must not contain NUL characters.")
        if len(value) > max_length:
            raise Refused(f"must be at most {max_length} characters.")
        return value

    return Rule(check, lambda: {"type": "string", "maxLength": max_length})


def choice(
    choices: tuple[str, ...], *, labels: Sequence[tuple[str, str]] = (), help: str = ""
) -> Rule:
    """One of ``choices`` (``labels``: what each means, for the OpenAPI document)."""

    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in choices:
            raise Refused(f"must be one of {', '.join(choices)}.")
        return value

    return Rule(check, lambda: _enum(choices, labels), help)


def _enum(choices: tuple[str, ...], labels: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """An enum's schema; ``x-choices`` (each value with its label) is for the OpenAPI
    document, which names a choice set by them (``memoryhub.api.schema``)."""
    labelled = [list(pair) for pair in labels] or [[each, each] for each in choices]
    return {"type": "string", "enum": list(choices), X_CHOICES: labelled}


#: The key of an enum's labelled values in a rule's schema.
X_CHOICES = "x-choices"


def flag(*, help: str = "") -> Rule:
    def check(value: Any) -> bool:
        if not isinstance(value, bool):
            raise Refused("must be true or false.")
        return value

    return Rule(check, lambda: {"type": "boolean"}, help)


def is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def integer(
    low: Bound,
    high: Bound,
    *,
    nullable: bool = False,
    states_null: bool | None = None,
    default: Bound | None = None,
    help: str = "",
) -> Rule:
    """An integer from ``low`` to ``high`` (a bool is not one)."""

    def check(value: Any) -> int:
        if not is_integer(value) or not _limit(low) <= value <= _limit(high):
            raise Refused(f"must be an integer from {_limit(low)} to {_limit(high)}.")
        return int(value)

    def schema() -> dict[str, Any]:
        stated = {"type": "integer", "minimum": _limit(low), "maximum": _limit(high)}
        if default is not None:
            stated["default"] = _limit(default)
        return stated

    return Rule(check, schema, help, nullable, states_null=states_null)


def number(low: float, high: float, *, message: str, help: str = "") -> Rule:
    """A number from ``low`` to ``high`` (a bool is not one), answered as a float; null
    is no number."""

    def check(value: Any) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not low <= float(value) <= high
        ):
            raise Refused(message)
        return float(value)

    schema = {"type": "number", "minimum": low, "maximum": high}
    return Rule(check, lambda: dict(schema), help, nullable=True, states_null=False)


def parse_moment(value: Any, *, dates: bool = False) -> datetime | None:
    """A ``datetime`` or an ISO 8601 date-time as a ``datetime`` (naive when it names no
    time zone); with ``dates``, also a date alone (a ``date`` or ``"2025-03-01"``), as
    its start in UTC. None for anything else."""
    moment = value
    if isinstance(value, str):
        if not value.isascii():
            # Django's parsers read any script's digits ("٢٠٢٥-٠٣-٠١"); ISO 8601 is ASCII.
            return None
        try:
            # A date first: parse_datetime reads "2025-03-01" as a naive midnight.
            moment = (parse_date(value) if dates else None) or parse_datetime(value)
        except ValueError:
            return None
    if dates and isinstance(moment, date) and not isinstance(moment, datetime):
        moment = datetime.combine(moment, time.min, tzinfo=UTC)
    return moment if isinstance(moment, datetime) else None


def check_moment(value: Any, *, within: tuple[datetime, datetime], dates: bool) -> datetime:
    """:func:`parse_moment`, with a time zone, inside ``within``."""
    moment = parse_moment(value, dates=dates)
    if moment is None:
        shape = "date-time with a time zone" + (", or a date (its start in UTC)" if dates else "")
        raise Refused(f"must be an ISO 8601 {shape}.")
    if timezone.is_naive(moment):
        raise Refused("must include a time zone.")
    try:
        inside = within[0] <= moment <= within[1]
    except OverflowError:  # an offset that moves the moment outside datetime's years
        inside = False
    if not inside:
        raise Refused(f"must be between {within[0]:%Y-%m-%d} and {within[1]:%Y-%m-%d} (UTC).")
    return moment


def moment(
    within: tuple[datetime, datetime] = OCCURRED_RANGE, *, dates: bool = True, help: str = ""
) -> Rule:
    """A moment: an ISO 8601 date-time with a time zone (or a ``datetime``); with
    ``dates``, a date alone too, as its start in UTC. Null is no moment."""

    def schema() -> dict[str, Any]:
        # A date alone is a moment too, which JSON Schema's date-time is not.
        return {"type": "string"} if dates else {"type": "string", "format": "date-time"}

    return Rule(lambda value: check_moment(value, within=within, dates=dates), schema, help, True)


def _below(path: str) -> str:
    """A path ``boundary.json_problems`` gave, below the field it checked."""
    if path == "non_field_errors":
        return ""
    return path if path.startswith("[") else f".{path}"


def json_object(
    *,
    max_depth: int,
    max_bytes: Bound | None = None,
    checks: tuple[Callable[[Mapping[str, Any]], dict[str, list[str]]], ...] = (),
    nullable: bool = False,
    null: Any = None,
    states_null: bool | None = None,
    help: str = "",
) -> Rule:
    """A JSON object (``boundary.json_problems``: no NUL, finite numbers, nested at most
    ``max_depth``), of at most ``max_bytes`` as UTF-8 JSON, passing ``checks`` (each
    answers messages by path below the field)."""

    def check(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise Refused("must be an object.")
        problems = boundary.json_problems(value, "", max_depth=max_depth)
        if problems:
            raise Refused({_below(path): messages for path, messages in problems.items()})
        if max_bytes is not None:
            size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
            if size > _limit(max_bytes):
                raise Refused(f"is {size} bytes of JSON; at most {_limit(max_bytes)}.")
        errors: dict[str, list[str]] = {}
        for each in checks:
            for path, messages in each(value).items():
                errors.setdefault(path, []).extend(messages)
        if errors:
            raise Refused(errors)
        return value

    return Rule(check, lambda: {"type": "object"}, help, nullable, null, states_null)
