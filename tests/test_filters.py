"""The where language: precise errors, and the SQL agrees with the Python reference."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryhub.filters import MAX_DEPTH, FilterError, compile_where, evaluate
from memoryhub.models import MemoryRecord

from .factories import KnowledgeBaseFactory, MemoryRecordFactory


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


# --- the same answers from PostgreSQL and from the Python reference ----------------------

keys = st.sampled_from(["a", "b", "price", "tier"])
strings = st.text(alphabet="abcXYZ019 é-", max_size=4)
numbers = st.one_of(
    st.integers(min_value=-1000, max_value=1000),
    st.floats(min_value=-1000, max_value=1000, allow_nan=False, allow_infinity=False).map(
        lambda f: round(f, 3)
    ),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, strings)
values = st.one_of(scalars, st.lists(scalars, max_size=3))
documents = st.dictionaries(keys, values, max_size=4)


def conditions() -> st.SearchStrategy:
    comparison = st.tuples(
        st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), st.one_of(numbers, strings)
    )
    membership = st.tuples(st.sampled_from(["$in", "$nin"]), st.lists(scalars, max_size=3))
    equality = st.tuples(st.sampled_from(["$eq", "$ne"]), values)
    exists = st.tuples(st.just("$exists"), st.booleans())
    operator = st.one_of(comparison, membership, equality, exists)
    field = st.one_of(
        st.builds(lambda k, v: {k: v}, keys, values),
        st.builds(lambda k, ops: {k: dict(ops)}, keys, st.lists(operator, min_size=1, max_size=2)),
    )
    return st.recursive(
        field,
        lambda inner: st.one_of(
            st.builds(lambda parts: {"$and": parts}, st.lists(inner, min_size=1, max_size=3)),
            st.builds(lambda parts: {"$or": parts}, st.lists(inner, min_size=1, max_size=3)),
        ),
        max_leaves=6,
    )


@pytest.fixture
def corpus(tenant):  # type: ignore[no-untyped-def]
    kb = KnowledgeBaseFactory(domain=tenant.domain)
    fixed = [
        {},
        {"a": 1},
        {"a": 1.0},
        {"a": "1"},
        {"a": True},
        {"a": None},
        {"price": 5},
        {"price": 10.5},
        {"price": "7"},
        {"tier": "public"},
        {"tier": "Public"},
        {"tier": ["public", "x"]},
        {"a": [1, 2]},
        {"b": "é"},
        {"b": "abc", "price": -3},
    ]
    records = [MemoryRecordFactory(knowledge_base=kb, metadata=metadata) for metadata in fixed]
    return kb, records


@pytest.mark.django_db
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(where=conditions(), extra=st.lists(documents, max_size=3))
def test_sql_matches_the_python_reference(corpus, where, extra):
    kb, records = corpus
    added = [MemoryRecordFactory(knowledge_base=kb, metadata=doc) for doc in extra]
    everything = records + added
    try:
        expected = {str(r.pk) for r in everything if evaluate(where, r.metadata)}
        got = {
            str(pk)
            for pk in MemoryRecord.unscoped.filter(knowledge_base=kb)
            .filter(compile_where(where))
            .values_list("pk", flat=True)
        }
        assert got == expected, where
    finally:
        MemoryRecord.unscoped.filter(pk__in=[r.pk for r in added]).delete()


@pytest.mark.parametrize(
    "where",
    [
        {"$or": [{"a": None}, {"a": {"$nin": []}}]},  # found by hypothesis
        {"$or": [{"a": 1}, {}]},
        {"$and": [{}, {"$or": [{"zzz": 1}, {"q": {"$nin": []}}]}]},
    ],
)
def test_match_everything_survives_inside_an_or(corpus, where):
    kb, records = corpus
    got = set(
        MemoryRecord.unscoped.filter(knowledge_base=kb)
        .filter(compile_where(where))
        .values_list("pk", flat=True)
    )
    assert got == {r.pk for r in records}
    assert all(evaluate(where, r.metadata) for r in records)


@pytest.mark.parametrize(
    ("where", "matching"),
    [
        ({"a": 1}, [{"a": 1}, {"a": 1.0}]),
        ({"a": "1"}, [{"a": "1"}]),
        ({"a": True}, [{"a": True}]),
        ({"a": None}, [{"a": None}]),
        ({"price": {"$gt": 6}}, [{"price": 10.5}]),
        ({"price": {"$gte": "7"}}, [{"price": "7"}]),
        ({"price": {"$lt": 100}}, [{"price": 5}, {"price": 10.5}, {"b": "abc", "price": -3}]),
        ({"tier": {"$ne": "public"}}, "all but 1"),
        ({"tier": ["public", "x"]}, [{"tier": ["public", "x"]}]),
        ({"b": {"$exists": True}}, [{"b": "é"}, {"b": "abc", "price": -3}]),
    ],
)
@pytest.mark.django_db
def test_documented_semantics(corpus, where, matching):
    kb, records = corpus
    got = [
        r.metadata
        for r in MemoryRecord.unscoped.filter(knowledge_base=kb).filter(compile_where(where))
    ]
    if matching == "all but 1":
        assert len(got) == len(records) - 1
    else:
        assert sorted(map(str, got)) == sorted(map(str, matching))
