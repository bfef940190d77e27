"""The where language: precise errors, and what each filter matches in PostgreSQL."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryhub.filters import MAX_DEPTH, FilterError, compile_where
from memoryhub.models import MemoryRecord
from tests.factories import KnowledgeBaseFactory, MemoryRecordFactory


@pytest.mark.parametrize(
    ("where", "path"),
    [
        ([], "where"),
        ({"$and": {}}, "where.$and"),
        ({"$and": []}, "where.$and"),
        ({"$and": [{"a": 1}, "x"]}, "where.$and[1]"),
        ({"$and": [{"a": 1}, {"price": {"$gte": [1]}}]}, "where.$and[1].price.$gte"),
        ({"price": {"$regex": "x"}}, "where.price.$regex"),
        ({"$nor": []}, "where.$nor"),
        ({"a": {"$in": "x"}}, "where.a.$in"),
        ({"a": {"$in": [1, [2]]}}, "where.a.$in[1]"),
        ({"a": {"$in": list(range(101))}}, "where.a.$in"),
        ({"a": {"$exists": 1}}, "where.a.$exists"),
        ({"a": {"$gt": True}}, "where.a.$gt"),
        ({"a": {"$gt": None}}, "where.a.$gt"),
        ({"a": float("inf")}, "where.a"),
        ({"a": "nul\x00"}, "where.a"),
        ({"": 1}, "where."),
        ({"$or": [{"a": {"$lt": {"b": 1}}}]}, "where.$or[0].a.$lt"),
    ],
)
def test_errors_name_the_path(where, path):
    with pytest.raises(FilterError) as raised:
        compile_where(where)
    assert raised.value.path == path
    assert path in raised.value.errors


def test_too_deep_and_too_large_are_refused():
    deep: dict = {"a": 1}
    for _ in range(MAX_DEPTH):
        deep = {"$and": [deep]}
    with pytest.raises(FilterError, match="nested too deeply"):
        compile_where(deep)
    compile_where({"$or": [{f"k{i}": i} for i in range(100)]})  # 100 conditions: fine
    too_many = {"$and": [{"$or": [{f"k{i}": i} for i in range(100)]} for _ in range(3)]}
    with pytest.raises(FilterError, match="too large"):
        compile_where(too_many)


def test_empty_filter_is_no_filter():
    assert str(compile_where(None)) == str(compile_where({}))


# --- what a filter matches, written out by hand over a fixed dataset -------------------

DATASET = {
    "empty": {},
    "a_int": {"a": 1},
    "a_float": {"a": 1.0},
    "a_zero": {"a": 0},
    "a_str": {"a": "1"},
    "a_true": {"a": True},
    "a_false": {"a": False},
    "a_null": {"a": None},
    "a_list": {"a": [1, 2]},
    "a_object": {"a": {"x": 1}},
    "dotted": {"a.x": 1},
    "price_5": {"price": 5},
    "price_10.5": {"price": 10.5},
    "price_0": {"price": 0},
    "price_text_7": {"price": "7"},
    "tier_public": {"tier": "public"},
    "tier_Public": {"tier": "Public"},
    "tier_b": {"tier": "b"},
    "tier_list": {"tier": ["public", "x"]},
    "b_accent": {"b": "é"},
    "b_abc": {"b": "abc", "price": -3},
    "digit_key": {"7": "seven", "99999999999999999999": 1},
}
EVERYTHING = frozenset(DATASET)
WITH_A = frozenset(name for name in DATASET if name.startswith("a_"))


@pytest.fixture
def dataset(tenant):
    """The knowledge base holding ``DATASET``, and each record's name by primary key."""
    kb = KnowledgeBaseFactory(domain=tenant.domain)
    names = {
        MemoryRecordFactory(knowledge_base=kb, metadata=metadata).pk: name
        for name, metadata in DATASET.items()
    }
    return kb, names


EXPECTED = [
    # equality is JSON equality
    ({}, EVERYTHING),
    ({"a": 1}, {"a_int", "a_float"}),
    ({"a": {"$eq": 1.0}}, {"a_int", "a_float"}),
    ({"a": 0}, {"a_zero"}),
    ({"a": False}, {"a_false"}),
    ({"a": True}, {"a_true"}),
    ({"a": "1"}, {"a_str"}),
    ({"a": None}, {"a_null"}),
    ({"a": [1, 2]}, {"a_list"}),
    ({"a": [2, 1]}, set()),
    ({"a": {"x": 1}}, {"a_object"}),
    ({"a.x": 1}, {"dotted"}),  # keys are literal, not paths
    ({"tier": "public"}, {"tier_public"}),  # not "Public", not a list holding it
    ({"tier": ["public", "x"]}, {"tier_list"}),
    ({"b": "abc", "price": -3}, {"b_abc"}),
    ({"b": "abc", "price": 3}, set()),
    # $ne and $nin also match a missing key
    ({"a": {"$ne": 1}}, EVERYTHING - {"a_int", "a_float"}),
    ({"a": {"$ne": None}}, EVERYTHING - {"a_null"}),
    ({"a": {"$in": [1, "1"]}}, {"a_int", "a_float", "a_str"}),
    ({"a": {"$in": [None, False]}}, {"a_null", "a_false"}),
    ({"a": {"$in": []}}, set()),
    ({"a": {"$nin": [1, True]}}, EVERYTHING - {"a_int", "a_float", "a_true"}),
    ({"a": {"$nin": []}}, EVERYTHING),
    ({"a": {"$exists": True}}, WITH_A),
    ({"a": {"$exists": False}}, EVERYTHING - WITH_A),
    ({"a": {"$exists": True, "$ne": None}}, WITH_A - {"a_null"}),
    # numbers compare with numbers only, strings with strings by code point
    ({"price": {"$gt": 5}}, {"price_10.5"}),
    ({"price": {"$gte": 5}}, {"price_5", "price_10.5"}),
    ({"price": {"$lt": 5}}, {"price_0", "b_abc"}),
    ({"price": {"$lte": 0}}, {"price_0", "b_abc"}),
    ({"price": {"$gt": 0, "$lt": 10}}, {"price_5"}),
    ({"a": {"$gte": 1}}, {"a_int", "a_float"}),  # true is not a number here
    ({"price": {"$gte": "7"}}, {"price_text_7"}),
    ({"price": {"$gt": "10"}}, {"price_text_7"}),  # "7" > "10" as text
    ({"price": {"$lt": "7"}}, set()),
    ({"tier": {"$lt": "a"}}, {"tier_Public"}),
    ({"tier": {"$gte": "b"}}, {"tier_b", "tier_public"}),
    ({"b": {"$gt": "z"}}, {"b_accent"}),
    # $and, $or, and several keys in one object
    ({"$or": [{"a": 1}, {"tier": "public"}]}, {"a_int", "a_float", "tier_public"}),
    ({"$and": [{"price": {"$exists": True}}, {"b": "abc"}]}, {"b_abc"}),
    ({"$and": [{"a": {"$ne": 1}}, {"a": {"$exists": True}}]}, WITH_A - {"a_int", "a_float"}),
    # an empty $in/$nin or {} inside an $or must not vanish (found by hypothesis)
    ({"$or": [{"a": None}, {"a": {"$nin": []}}]}, EVERYTHING),
    ({"$or": [{"a": 1}, {}]}, EVERYTHING),
    ({"$or": [{"zzz": 1}, {"a": {"$in": []}}]}, set()),
    ({"$and": [{}, {"$or": [{"zzz": 1}, {"q": {"$nin": []}}]}]}, EVERYTHING),
    # a key made of digits is an object's key, not an array index (a huge one is no 500)
    ({"7": "seven"}, {"digit_key"}),
    ({"7": {"$gte": "s"}}, {"digit_key"}),
    ({"99999999999999999999": 1}, {"digit_key"}),
    ({"99999999999999999999": {"$gt": 0}}, {"digit_key"}),
    ({"7": {"$exists": True}}, {"digit_key"}),
]


@pytest.mark.parametrize(("where", "expected"), EXPECTED, ids=[str(w) for w, _ in EXPECTED])
def test_a_filter_matches_exactly_the_records_written_out(dataset, where, expected):
    kb, names = dataset
    matched = (
        MemoryRecord.unscoped.filter(knowledge_base=kb)
        .filter(compile_where(where))
        .values_list("pk", flat=True)
    )
    assert {names[pk] for pk in matched} == set(expected)


# --- laws that hold for any filter, checked on generated ones ---------------------------

keys = st.sampled_from(["a", "b", "price", "tier"])
numbers = st.one_of(
    st.integers(min_value=-20, max_value=20),
    st.floats(min_value=-20, max_value=20, allow_nan=False).map(lambda f: round(f, 2)),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(alphabet="abP1é", max_size=3))
values = st.one_of(scalars, st.lists(scalars, max_size=2))


def fields() -> st.SearchStrategy:
    comparison = st.tuples(
        st.sampled_from(["$gt", "$gte", "$lt", "$lte"]),
        st.one_of(numbers, st.text(alphabet="abP1é", max_size=3)),
    )
    membership = st.tuples(st.sampled_from(["$in", "$nin"]), st.lists(scalars, max_size=3))
    operator = st.one_of(
        comparison,
        membership,
        st.tuples(st.sampled_from(["$eq", "$ne"]), values),
        st.tuples(st.just("$exists"), st.booleans()),
    )
    return st.one_of(
        st.builds(lambda k, v: {k: v}, keys, values),
        st.builds(lambda k, ops: {k: dict(ops)}, keys, st.lists(operator, min_size=1, max_size=2)),
    )


@pytest.mark.django_db
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(left=fields(), right=fields(), key=keys, value=values, members=st.lists(scalars, max_size=3))
def test_and_or_and_negations_obey_set_laws(dataset, left, right, key, value, members):
    """$and is intersection, $or is union, and $ne/$nin/$exists:false are complements, for
    any filter; the hand-written table above says what the pieces match."""
    kb, names = dataset

    def matched(where):
        rows = MemoryRecord.unscoped.filter(knowledge_base=kb).filter(compile_where(where))
        return {names[pk] for pk in rows.values_list("pk", flat=True)}

    assert matched({"$and": [left, right]}) == matched(left) & matched(right)
    assert matched({"$or": [left, right]}) == matched(left) | matched(right)
    assert matched({key: {"$ne": value}}) == EVERYTHING - matched({key: value})
    assert matched({key: {"$nin": members}}) == EVERYTHING - matched({key: {"$in": members}})
    assert matched({key: {"$exists": False}}) == EVERYTHING - matched({key: {"$exists": True}})


def test_string_comparisons_ask_for_code_point_order_whatever_the_database_collation():
    # The test database is created with the C.UTF-8 locale, whose default collation is
    # already code point order; a site's database may not be, so the SQL must say it.
    sql = str(MemoryRecord.unscoped.filter(compile_where({"tier": {"$lt": "a"}})).query)
    assert 'COLLATE "C"' in sql
    assert "COLLATE" not in str(
        MemoryRecord.unscoped.filter(compile_where({"n": {"$lt": 1}})).query
    )
