"""The input boundary: what an argument from outside must be before a door lets it in.

Every door passes what it received through these checks before a service or the
database sees it: the REST API its query string and bodies (``api.parsers``,
``api.views``), MCP its tool arguments and resource URIs (``mcp.tools``,
``mcp.resources``), the admin its action parameters, object ids and JSON form fields
(``tenants.admin``, ``memoryhub.admin``). A failure is :class:`ValidationFailed` (or a
form error) whose path names the argument; each door answers it in its own way (a JSON
400, a tool error ``invalid``, a JSON-RPC error, the admin's 400 or form error).

Checked here is what no argument may hold, whatever it means: NUL characters
(PostgreSQL text cannot store them, and a query that compares one fails), unpaired
UTF-16 surrogates (nothing can encode them), control characters in names and
identifiers, JSON nested deeper than :data:`MAX_JSON_DEPTH`, values that are not JSON,
and duplicate object keys (which a reader and a writer may resolve differently). What
a field means (a kind, a date, a bound of the settings) is the service's rule.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from .exceptions import ValidationFailed

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_NAME_LENGTH",
    "Errors",
    "check_json",
    "check_name",
    "check_slug",
    "json_problems",
    "loads",
    "messages",
    "raise_if",
    "surrogate_path",
    "text_problem",
    "unique_keys",
]

Errors = dict[str, list[str]]

#: JSON deeper than this is refused wherever it arrives (a write's metadata has its own,
#: lower bound; this one keeps a walk, a parser or a form far from the interpreter's
#: recursion limit).
MAX_JSON_DEPTH = 64
#: A name or identifier (a namespace in a filter, a knowledge base, an id) is at most
#: this long where no setting bounds it.
MAX_NAME_LENGTH = 255
#: A domain slug, as the REST API's ``<slug:domain>`` matches it and ``Domain.slug``
#: stores it.
SLUG = re.compile(r"[-a-zA-Z0-9_]{1,64}")

UNPAIRED_SURROGATE = "contains an unpaired UTF-16 surrogate; send valid Unicode text."
#: How many problems one check reports before it stops looking (a client fixes the first
#: ones; a body of a million NULs is not a million messages).
MAX_PROBLEMS = 20


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def surrogate_path(data: Any) -> str | None:
    """The path (``items[0].content``) of the first string or key with a lone surrogate."""
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and _has_surrogate(value):
                return path or "non_field_errors"
        elif isinstance(value, dict):
            for key, inner in value.items():
                printable = key.encode("utf-8", "backslashreplace").decode("utf-8")
                child = f"{path}.{printable}" if path else printable
                if _has_surrogate(key):
                    return child
                stack.append((inner, child))
        elif isinstance(value, list):
            stack.extend((inner, f"{path}[{index}]") for index, inner in enumerate(value))
    return None


#: Unicode categories no name may hold: control characters (a newline, ESC) and
#: invisible format characters (zero-width spaces and joiners, bidi controls, the BOM,
#: the soft hyphen): a name that holds one looks like another name, or rewrites a
#: terminal or a page it is shown on.
INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf"})
INVISIBLE = "may not contain control or invisible format characters."


def _has_control(text: str) -> bool:
    return any(unicodedata.category(char) in INVISIBLE_CATEGORIES for char in text)


def has_invisible(text: str) -> bool:
    """Whether ``text`` holds a control or invisible format character (Cc, Cf)."""
    # isprintable() is False for both categories (and a few others): the fast path.
    return not text.isprintable() and _has_control(text)


def text_problem(
    value: Any, *, max_length: int | None = None, name: bool = False, blank: bool = True
) -> str | None:
    """What is wrong with ``value`` as a string argument, or None.

    ``name``: it names or identifies something (a namespace, a key, a tag, a knowledge
    base, a domain, an id), so control characters (a newline too) are refused as well.
    """
    if not isinstance(value, str):
        return "must be a string."
    if "\x00" in value:
        return "may not contain NUL characters."
    if not value.isascii() and _has_surrogate(value):
        return UNPAIRED_SURROGATE
    if name and has_invisible(value):
        return INVISIBLE
    if not blank and not value.strip():
        return "may not be blank."
    if max_length is not None and len(value) > max_length:
        return f"is longer than {max_length} characters."
    return None


def check_name(
    value: Any, path: str, errors: Errors, *, max_length: int = MAX_NAME_LENGTH
) -> str | None:
    """``value`` if it is a usable name (see :func:`text_problem`); else an error under
    ``path`` and None."""
    problem = text_problem(value, max_length=max_length, name=True, blank=False)
    if problem is not None:
        errors.setdefault(path, []).append(problem)
        return None
    return value


def check_slug(value: Any, path: str = "domain") -> str:
    """``value`` as a domain slug; :class:`ValidationFailed` naming ``path`` otherwise."""
    errors: Errors = {}
    if check_name(value, path, errors, max_length=64) is not None and not SLUG.fullmatch(value):
        errors[path] = ["must be a domain slug (letters, digits, - and _)."]
    raise_if(errors)
    return value


def json_problems(value: Any, path: str = "", *, max_depth: int = MAX_JSON_DEPTH) -> Errors:  # noqa: C901
    """What in ``value`` (parsed JSON) no argument may hold, by path: NUL characters and
    unpaired surrogates in strings and keys, non-string keys, numbers that are not
    finite, values that are not JSON, nesting past ``max_depth``.

    Iterative (a value nested past the recursion limit is walked too), and it stops
    after :data:`MAX_PROBLEMS` problems.
    """
    errors: Errors = {}
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack and len(errors) < MAX_PROBLEMS:
        current, where, depth = stack.pop()
        label = where or "non_field_errors"
        if isinstance(current, Mapping | list | tuple) and depth >= max_depth:
            errors.setdefault(label, []).append(
                f"is nested too deeply (at most {max_depth} levels)."
            )
        elif isinstance(current, Mapping):
            for key, inner in current.items():
                if not isinstance(key, str):
                    errors.setdefault(label, []).append("keys must be strings.")
                    break
                printable = key.encode("utf-8", "backslashreplace").decode("utf-8")
                child = f"{where}.{printable}" if where else printable
                problem = text_problem(key)
                if problem is not None:
                    errors.setdefault(label, []).append(f"key {printable!r} {problem}")
                    break
                stack.append((inner, child, depth + 1))
        elif isinstance(current, list | tuple):
            stack.extend(
                (inner, f"{where}[{index}]", depth + 1) for index, inner in enumerate(current)
            )
        elif isinstance(current, str):
            problem = text_problem(current)
            if problem is not None:
                errors.setdefault(label, []).append(problem)
        elif isinstance(current, float):
            if not math.isfinite(current):
                errors.setdefault(label, []).append("must be a finite number.")
        elif current is not None and not isinstance(current, bool | int):
            errors.setdefault(label, []).append(f"{type(current).__name__} is not a JSON value.")
    return errors


def check_json(value: Any, path: str = "", *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``value`` if :func:`json_problems` finds nothing; else :class:`ValidationFailed`."""
    raise_if(json_problems(value, path, max_depth=max_depth))
    return value


def messages(errors: Errors) -> list[str]:
    """``errors`` as a form shows them: ``"path: message"``, each on its own."""
    return [
        message if path == "non_field_errors" else f"{path}: {message}"
        for path, problems in errors.items()
        for message in problems
    ]


def raise_if(errors: Errors) -> None:
    if errors:
        raise ValidationFailed(errors)


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` of every JSON parser at a door: a key given twice is an
    error (``ValueError``), never the last value silently winning."""
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r}")
            seen.add(key)
    return result


def loads(text: str) -> Any:
    """JSON text typed into a form, read as every door reads JSON: ``ValueError`` with a
    message for text that is not JSON, gives a key twice, or is nested deeper than the
    parser can follow."""
    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise ValueError(exc.msg) from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
