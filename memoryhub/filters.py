"""The ``where`` filter language over record metadata, compiled to Q objects.

A filter is a JSON object:

* ``{"tier": "public"}`` — equality on the top-level metadata key ``tier`` (keys are
  literal: ``"a.b"`` is the key named ``a.b``, not a path);
* ``{"price": {"$gte": 5, "$lt": 10}}`` — operators ``$eq $ne $gt $gte $lt $lte $in $nin
  $exists``; several operators on one key all apply;
* ``{"$and": [...]}`` and ``{"$or": [...]}`` — lists of filters; several keys in one
  object all apply (an implicit ``$and``).

Semantics (``tests/models/test_filters.py`` writes out what each kind of filter matches):

* equality is JSON equality: ``5`` equals ``5.0`` but not ``"5"``; ``true`` is not ``1``;
  ``null`` matches an explicit null, not a missing key;
* ``$gt $gte $lt $lte`` take a number or a string; a number compares only with numbers
  (numerically) and a string only with strings (by code point), never across types;
* ``$ne`` and ``$nin`` also match records that lack the key; ``$in`` and ``$nin`` take a
  list of at most ``MAX_LIST`` scalars;
* ``$exists: true|false`` tests whether the key is present.

Anything else raises :class:`FilterError` naming the offending path, e.g.
``where.$and[1].price.$gte``. No SQL is ever built from strings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from django.db.models import CharField, F, Func, JSONField, Q, TextField, Value
from django.db.models.fields.json import HasKey, KeyTransform
from django.db.models.functions import Collate
from django.db.models.lookups import (
    Exact,
    GreaterThan,
    GreaterThanOrEqual,
    LessThan,
    LessThanOrEqual,
)

from .exceptions import ValidationFailed

__all__ = ["MAX_DEPTH", "MAX_LIST", "MAX_NODES", "FilterError", "compile_where"]

MAX_DEPTH = 8
MAX_NODES = 200
MAX_LIST = 100
MAX_KEY_LENGTH = 200
#: The most JSON bytes the value of an indexed metadata key (``INDEXED_METADATA_KEYS``)
#: may hold (a write's item refuses larger ones): a btree entry holds at most about 2.7 kB.
MAX_INDEXED_VALUE_BYTES = 1_000
FIELD = "metadata"

COMPARISONS = {
    "$gt": GreaterThan,
    "$gte": GreaterThanOrEqual,
    "$lt": LessThan,
    "$lte": LessThanOrEqual,
}
OPERATORS = frozenset({"$eq", "$ne", "$in", "$nin", "$exists", *COMPARISONS})


class FilterError(ValidationFailed):
    """An invalid ``where`` filter; ``path`` names the part that is wrong."""

    code = "invalid_filter"

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__({path: [message]})


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, bool | str) or _is_number(value)


def _check_value(value: Any, path: str) -> None:
    """A JSON value for equality: scalars, lists and objects of them, finite, no NUL."""
    if isinstance(value, float) and not math.isfinite(value):
        raise FilterError(path, "numbers must be finite.")
    if isinstance(value, str) and "\x00" in value:
        raise FilterError(path, "strings may not contain NUL characters.")
    if isinstance(value, list):
        if len(value) > MAX_LIST:
            raise FilterError(path, f"lists hold at most {MAX_LIST} values.")
        for index, inner in enumerate(value):
            _check_value(inner, f"{path}[{index}]")
    elif isinstance(value, dict):
        for key, inner in value.items():
            if not isinstance(key, str):
                raise FilterError(path, "object keys must be strings.")
            if "\x00" in key:
                raise FilterError(path, "object keys may not contain NUL characters.")
            _check_value(inner, f"{path}.{key}")
    elif not _is_scalar(value):
        raise FilterError(path, f"{type(value).__name__} is not a JSON value.")


class _Compiler:
    def __init__(self) -> None:
        self.nodes = 0

    def count(self, path: str) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise FilterError(path, f"the filter is too large (at most {MAX_NODES} conditions).")

    def compile(self, where: Any, path: str, depth: int) -> Q:
        if depth > MAX_DEPTH:
            raise FilterError(path, f"the filter is nested too deeply (at most {MAX_DEPTH}).")
        if not isinstance(where, Mapping):
            raise FilterError(path, "must be an object.")
        q = Q()
        for key, value in where.items():
            if not isinstance(key, str):
                raise FilterError(path, "keys must be strings.")
            child = f"{path}.{key}"
            if key in ("$and", "$or"):
                q &= self.combine(key, value, child, depth)
            elif key.startswith("$"):
                raise FilterError(child, f"unknown operator {key!r}; use $and or $or here.")
            else:
                if not key or len(key) > MAX_KEY_LENGTH or "\x00" in key:
                    raise FilterError(child, "is not a valid metadata key.")
                q &= self.field(key, value, child)
        # {} matches everything; an empty Q() would vanish inside an $or.
        return q if q else ~Q(pk__in=[])

    def combine(self, operator: str, value: Any, path: str, depth: int) -> Q:
        if not isinstance(value, list) or not value:
            raise FilterError(path, f"{operator} takes a non-empty list of filters.")
        if len(value) > MAX_LIST:
            raise FilterError(path, f"{operator} takes at most {MAX_LIST} filters.")
        parts = [self.compile(inner, f"{path}[{i}]", depth + 1) for i, inner in enumerate(value)]
        combined = parts[0]
        for part in parts[1:]:
            combined = combined & part if operator == "$and" else combined | part
        return combined

    def field(self, key: str, condition: Any, path: str) -> Q:
        if isinstance(condition, Mapping) and any(
            isinstance(name, str) and name.startswith("$") for name in condition
        ):
            q = Q()
            for operator, operand in condition.items():
                if not isinstance(operator, str) or operator not in OPERATORS:
                    raise FilterError(f"{path}.{operator}", f"unknown operator {operator!r}.")
                q &= self.operator(key, operator, operand, f"{path}.{operator}")
            return q
        return self.operator(key, "$eq", condition, path)

    @staticmethod
    def equal(value: ObjectKey, json_type: Any, operand: Any) -> Q:
        """JSON equality; ``null`` is an explicit JSON null (SQL NULL would match nothing)."""
        if operand is None:
            return Q(Exact(json_type, "null"))
        return Q(Exact(value, Value(operand, output_field=JSONField())))

    def operator(self, key: str, operator: str, operand: Any, path: str) -> Q:  # noqa: C901
        self.count(path)
        value = ObjectKey(key, FIELD)
        present = Q(HasKey(F(FIELD), key))
        if operator == "$exists":
            if not isinstance(operand, bool):
                raise FilterError(path, "$exists takes true or false.")
            return present if operand else ~present
        json_type = Func(value, function="jsonb_typeof", output_field=CharField())
        if operator in ("$eq", "$ne"):
            _check_value(operand, path)
            equal = self.equal(value, json_type, operand)
            return equal if operator == "$eq" else ~present | (present & ~equal)
        if operator in ("$in", "$nin"):
            if not isinstance(operand, list):
                raise FilterError(path, f"{operator} takes a list.")
            if len(operand) > MAX_LIST:
                raise FilterError(path, f"{operator} takes at most {MAX_LIST} values.")
            for index, item in enumerate(operand):
                if not _is_scalar(item):
                    raise FilterError(f"{path}[{index}]", "must be a string, number, bool or null.")
                _check_value(item, f"{path}[{index}]")
            if not operand:
                # Match nothing / everything: an empty Q() would vanish inside an $or.
                return Q(pk__in=[]) if operator == "$in" else ~Q(pk__in=[])
            member = self.equal(value, json_type, operand[0])
            for item in operand[1:]:
                member |= self.equal(value, json_type, item)
            return member if operator == "$in" else ~present | (present & ~member)
        comparison = COMPARISONS[operator]
        if _is_number(operand):
            _check_value(operand, path)
            return Q(Exact(json_type, "number")) & Q(
                comparison(value, Value(operand, output_field=JSONField()))
            )
        if isinstance(operand, str):
            _check_value(operand, path)
            text = Collate(ObjectKeyText(key, FIELD), "C")
            return Q(Exact(json_type, "string")) & Q(comparison(text, Value(operand)))
        raise FilterError(path, f"{operator} takes a number or a string.")


class ObjectKey(KeyTransform):
    """``metadata -> 'key'``: a key of the metadata object, always as text.

    Django's ``KeyTransform`` sends a key made of digits as an integer (an array index):
    ``{"7": ...}`` would never match, and a key too large for an integer was a
    PostgreSQL error (``jsonb -> numeric``), a 500.
    """

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        lhs, params, key_transforms = self.preprocess_lhs(compiler, connection)
        if len(key_transforms) > 1:  # not built by this module: Django's own path form
            return super().as_postgresql(compiler, connection)
        return f"({lhs} {self.postgres_operator} %s)", (*params, self.key_name)


class ObjectKeyText(ObjectKey):
    """``metadata ->> 'key'``: :class:`ObjectKey`'s value as text."""

    postgres_operator = "->>"
    postgres_nested_operator = "#>>"
    output_field = TextField()


def compile_where(where: Any, *, path: str = "where") -> Q:
    """Compile a ``where`` filter to a Q over ``metadata``; ``None`` or ``{}`` is no filter."""
    if where is None or (isinstance(where, Mapping) and not where):
        return Q()
    return _Compiler().compile(where, path, depth=1)
