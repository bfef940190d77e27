"""Consolidation extractors: the invariants every answer keeps, and the built-in
patterns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memoryhub.consolidation import (
    MAX_FACT_CHARS,
    BuiltinExtractor,
    Episode,
    ExtractionError,
    Extractor,
    Fact,
    Operation,
    validate_operations,
)

# --- validate_operations ----------------------------------------------------------------

EPISODES = [Episode("e1", "My favourite colour is green."), Episode("e2", "Hello.")]
FACTS = [Fact("f1", "favourite colour: blue"), Fact("f2", "name: Bob")]


def test_valid_operations_come_back_as_a_list():
    operations = (
        Operation.add("likes tea", ["e1", "e2"], key="drink"),
        Operation.update("f1", "favourite colour: green", ["e1"]),
        Operation.delete("f2"),
    )
    assert validate_operations(operations, EPISODES, FACTS) == list(operations)


@pytest.mark.parametrize(
    ("operation", "reason"),
    [
        (Operation.add("  ", ["e1"]), "content is empty"),
        (Operation.add("x" * (MAX_FACT_CHARS + 1), ["e1"]), "2001 characters"),
        (Operation.add("likes tea", []), "no source episodes"),
        (Operation.update("f1", "favourite colour: green", []), "no source episodes"),
        (Operation.add("likes tea", ["e1", "e9"]), "unknown source episode 'e9'"),
        (Operation.delete("f1", ["e9"]), "unknown source episode 'e9'"),
        (Operation.update("f9", "favourite colour: green", ["e1"]), "unknown fact 'f9'"),
        (Operation.delete("f9"), "unknown fact 'f9'"),
        (Operation.none("f9"), "unknown fact 'f9'"),
        (Operation("add", content="likes tea", fact_id="f1", sources=("e1",)), "names no fact"),
        (Operation("delete", content="gone", fact_id="f1"), "carries content"),
        (Operation("update", "c", fact_id="f1", sources=("e1",), key="k"), "only an add"),
        (Operation.add("likes tea", ["e1"], key=" "), "key is blank"),
        (Operation.add("likes tea", ["e1"], key="k" * 256), "too long"),
    ],
)
def test_each_broken_invariant_is_refused(operation, reason):
    with pytest.raises(ExtractionError, match=reason):
        validate_operations([operation], EPISODES, FACTS)


def test_two_operations_on_one_fact_are_refused():
    operations = [Operation.update("f1", "favourite colour: green", ["e1"]), Operation.delete("f1")]
    with pytest.raises(ExtractionError, match=r"operation 1 .*'f1' named twice"):
        validate_operations(operations, EPISODES, FACTS)


def test_two_adds_of_one_key_are_refused():
    operations = [
        Operation.add("a", ["e1"], key="colour"),
        Operation.add("b", ["e2"], key="colour"),
    ]
    with pytest.raises(ExtractionError, match="'colour' added twice"):
        validate_operations(operations, EPISODES, FACTS)


def test_an_unknown_op_cannot_be_built():
    with pytest.raises(ValueError, match="op must be one of"):
        Operation("merge")  # type: ignore[arg-type]


# --- the built-in extractor -------------------------------------------------------------


def episodes(*texts: str) -> list[Episode]:
    start = datetime(2025, 1, 1, tzinfo=UTC)
    return [
        Episode(f"e{n}", text, created_at=start + timedelta(minutes=n))
        for n, text in enumerate(texts, 1)
    ]


def test_builtin_is_an_extractor_without_a_model():
    extractor = BuiltinExtractor()
    assert isinstance(extractor, Extractor)
    assert (extractor.name, extractor.model) == ("builtin", "")


def test_builtin_adds_keyed_facts_from_attribute_statements():
    operations = BuiltinExtractor().extract(
        episodes("Hi! My favourite colour is blue.", "Email: bob@example.com", "My name's Bob."),
        [],
    )
    assert operations == [
        Operation.add("favourite colour: blue", ["e1"], key="favourite colour"),
        Operation.add("email: bob@example.com", ["e2"], key="email"),
        Operation.add("name: Bob", ["e3"], key="name"),
    ]


def test_builtin_latest_value_updates_the_fact_citing_only_the_episodes_that_state_it():
    facts = [Fact("f1", "favourite colour: blue", derived_from=("old",))]
    operations = BuiltinExtractor().extract(
        episodes(
            "My favourite colour is red.",
            "Favourite colour is green now.",  # "X is Y" counts: the attribute is known
            "Nice weather. My favourite colour is green!",
        ),
        facts,
    )
    assert operations == [Operation.update("f1", "favourite colour: green", ["e2", "e3"])]


def test_builtin_orders_episodes_by_time_not_by_position():
    start = datetime(2025, 1, 1, tzinfo=UTC)
    given = [
        Episode("late", "My city is Lyon.", created_at=start + timedelta(days=1)),
        Episode("early", "My city is Paris.", created_at=start),
    ]
    assert BuiltinExtractor().extract(given, []) == [
        Operation.add("city: Lyon", ["late"], key="city")
    ]


def test_builtin_reads_x_is_y_for_an_attribute_stated_earlier_in_the_batch():
    operations = BuiltinExtractor().extract(
        episodes("My hometown is Nantes.", "Hometown is Brest now."), []
    )
    assert operations == [Operation.add("hometown: Brest", ["e2"], key="hometown")]


def test_builtin_restating_an_attribute_leaves_the_fact_as_it_is():
    facts = [Fact("f1", "Bob's favourite colour", key="favourite colour")]
    operations = BuiltinExtractor().extract(
        episodes("my favourite colour is BLUE"), [Fact("f2", "favourite colour: blue"), *facts]
    )
    assert operations == [Operation.none("f2", ["e1"])]


def test_builtin_merges_a_statement_repeated_across_episodes_with_a_count():
    operations = BuiltinExtractor().extract(
        episodes(
            "I love hiking in the Alps.",
            "Good morning. I really love hiking in the Alps.",
            "I love hiking in the alps",
            "I do not love hiking in the Alps.",  # a negation is never a near-duplicate
        ),
        [],
    )
    assert operations == [
        Operation.add("I love hiking in the alps", ["e1", "e2", "e3"], metadata={"count": 3})
    ]


def test_builtin_counts_a_restated_fact_without_changing_it():
    facts = [Fact("f1", "I love hiking in the Alps", metadata={"count": 4})]
    operations = BuiltinExtractor().extract(episodes("I really love hiking in the Alps!"), facts)
    assert operations == [Operation.none("f1", ["e1"], metadata={"count": 5})]


def test_builtin_proposes_nothing_for_chit_chat_questions_and_one_off_remarks():
    operations = BuiltinExtractor().extract(
        episodes(
            "Hello there!",
            "What is my favourite colour? Is it true that my car is red?",
            "The sky is blue today.",  # "X is Y" only for an attribute already known
            "I went to the cinema yesterday.",
            "ok thanks",
            "ok thanks",
        ),
        [Fact("f1", "favourite colour: blue")],
    )
    assert operations == []


def test_builtin_output_keeps_the_invariants():
    texts = ["My pet is a cat. I like tea a lot.", "My pet is a dog.", "I like tea a lot!"]
    facts = [Fact("f1", "pet: a cat"), Fact("f2", "I like tea a lot.", metadata={"count": 1})]
    operations = BuiltinExtractor().extract(episodes(*texts), facts)
    assert operations == [
        Operation.update("f1", "pet: a dog", ["e2"]),
        Operation.none("f2", ["e1", "e3"], metadata={"count": 3}),
    ]
    assert validate_operations(operations, episodes(*texts), facts) == operations
