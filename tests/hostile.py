"""Hostile input for the fuzz suites of every door: strings no field should hold, numbers
at the edges, JSON of every shape, and the REST bodies built from them.

Shared by ``test_api_fuzz`` (REST bodies) and ``test_fuzz_doors`` (MCP tools and
resources, JSON-RPC framing, REST routes, admin actions and forms).
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

#: ``FUZZ_EXAMPLES=5000`` searches longer (the default keeps each file's run short).
FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "120")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

HOSTILE_PIECES = [
    "",
    " ",
    "\x00",
    "nul\x00inside",
    "\ud800",  # unpaired high surrogate
    "\udfff",  # unpaired low surrogate
    "a\udc00b",
    "🧠\udbff",
    "\ud83d\ude00",  # a surrogate pair (an emoji, written the UTF-16 way)
    "🧠🔥",
    "\u202eevil\u202c",  # right-to-left override
    "עברית",
    "e\u0301",  # combining accent
    "\ufeffbom",
    "\u2028\u2029",
    "$gt",
    "$where",
    "a.b",
    "memory",
    "semantic",
    "user:alice",
    "x" * 300,
]
TEXT = st.one_of(
    st.sampled_from(HOSTILE_PIECES),
    st.text(st.characters(codec=None, exclude_categories=()), max_size=40),
    st.builds(lambda n: "y" * n, st.sampled_from([4001, 20_001, 70_000])),
)
NUMBERS = st.one_of(
    st.sampled_from([0, -0.0, 1, -1, 2**31, 2**53 + 1, 2**63, -(2**63) - 1, 2**64, 10**40]),
    st.sampled_from([1e308, -1e308, 5e-324, 1.7976931348623157e308]),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(TEXT, inner, max_size=5)),
    max_leaves=25,
)
#: Hypothesis keeps lists short; these are the long ones.
HUGE = st.sampled_from([list(range(101)), ["a"] * 1000, [{}] * 150, list(range(10_000))])
ANY = st.one_of(JSON, HUGE)


def field(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly well-typed values, sometimes anything at all."""
    return st.one_of(good, good, ANY)


ITEM = st.fixed_dictionaries(
    {"content": field(TEXT)},
    optional={
        "key": field(st.one_of(st.none(), TEXT)),
        "kind": field(st.sampled_from(["semantic", "episodic", "procedural", "dream"])),
        "namespace": field(st.one_of(st.none(), TEXT)),
        "tags": field(st.lists(TEXT, max_size=40)),
        "metadata": field(st.dictionaries(TEXT, JSON, max_size=6)),
        "expires_at": field(
            st.sampled_from(
                [
                    "2999-01-01T00:00:00Z",
                    "2999-01-01T00:00:00",  # naive
                    "9999-12-31T23:59:59-14:00",
                    "0001-01-01T00:00:00+14:00",
                    "2020-13-45T00:00:00Z",
                    "yesterday",
                ]
            )
        ),
        "ttl_seconds": field(st.sampled_from([1, 0, -1, 86400, 10**12, 1.5, True, "60"])),
        "id": ANY,
    },
)
WRITE_BODY = st.one_of(
    st.fixed_dictionaries(
        {"items": field(st.lists(st.one_of(ITEM, ITEM, ITEM, ANY), max_size=6))},
        optional={
            "source": field(st.sampled_from(["memory", "handbook", "nope", ""])),
            "sources": field(st.lists(st.sampled_from(["memory", "nope", ""]), max_size=3)),
            "wait": ANY,
        },
    ),
    ANY,
)

OPERATORS = ["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists"]
OPERAND = st.one_of(SCALARS, st.lists(SCALARS, max_size=4), HUGE, JSON)
CONDITION = st.one_of(
    SCALARS,
    st.dictionaries(
        st.sampled_from([*OPERATORS, "$regex", "$", "$where", "plain"]), OPERAND, max_size=3
    ),
    JSON,
)
LEAF = st.dictionaries(TEXT, CONDITION, max_size=3)
WHERE = st.recursive(
    LEAF,
    lambda inner: st.one_of(
        st.dictionaries(
            st.sampled_from(["$and", "$or", "$nor", "$not"]),
            st.one_of(st.lists(inner, max_size=4), inner, ANY),
            min_size=1,
            max_size=2,
        ),
        st.dictionaries(TEXT, inner, max_size=2),
    ),
    max_leaves=30,
)
QUERY_BODY = st.one_of(
    st.fixed_dictionaries(
        {"query": field(TEXT)},
        optional={
            "k": field(st.sampled_from([1, 5, 100, 0, 101, -1, 2**63, 1.0, True])),
            "sources": field(st.lists(st.sampled_from(["memory", "nope", ""]), max_size=3)),
            "namespaces": field(st.lists(TEXT, max_size=4)),
            "kinds": field(st.lists(st.sampled_from(["semantic", "dream"]), max_size=3)),
            "tags": field(st.lists(TEXT, max_size=4)),
            "where": field(WHERE),
            "mode": field(st.sampled_from(["vector", "keyword", "hybrid", "psychic"])),
            "min_score": field(st.sampled_from([-1, 1, 0.5, -0.0, 1.0000001, 1e308])),
            "format": field(st.sampled_from(["items", "grounding", "html"])),
            # Names of the service's own parameters: they must be refused, not bound.
            "scope": ANY,
            "request": ANY,
            "cls": ANY,
            "raw": ANY,
        },
    ),
    ANY,
)
FORGET_BODY = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "namespace": field(TEXT),
            "key": field(TEXT),
            "source": field(st.sampled_from(["memory", "nope", ""])),
            "all": field(st.sampled_from([False, 0, "true", None])),
        },
    ),
    ANY,
)
