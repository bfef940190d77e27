"""Hybrid search over conversation turns: a candidate's session weighs in, and the one
speaker a question names is favoured (``fusion.boost_conversation``), through the query
service too."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.test import override_settings

from memoryhub.conf import memoryhub_settings
from memoryhub.services import query, write
from memoryhub.services.query import fusion

OFF = {"SESSION_BOOST": 0, "SPEAKER_BOOST": 0, "STATEMENT_BOOST": 0, "LENGTH_BOOST": 0}


def row(content: str, session: object = None, **metadata: object) -> dict:
    data = dict(metadata)
    if session is not None:
        data["session"] = session
    return {
        "content": content,
        "metadata": data,
        "knowledge_base__name": "memory",
        "namespace": "conv",
    }


def test_a_ranking_without_sessions_is_unchanged():
    ranked = [("a", 0.9), ("b", 0.5)]
    rows = {"a": row("x"), "b": row("y")}
    assert fusion.boost_conversation(ranked, rows, "q", 0.2, 0.1) == ranked
    assert fusion.boost_conversation(ranked, {}, "q", 0.2, 0.1) == ranked


def test_turns_of_the_heaviest_session_rise_and_scores_stay_in_0_1():
    ranked = [("lone", 0.80), ("s1a", 0.78), ("s1b", 0.70), ("s1c", 0.60), ("s2", 0.79)]
    rows = {
        "lone": row("Ann: hello", session=2),
        "s1a": row("Ann: we went hiking", session=1),
        "s1b": row("Bob: where?", session=1),
        "s1c": row("Ann: the Alps", session=1),
        "s2": row("Bob: nice", session=3),
    }
    boosted = fusion.boost_conversation(ranked, rows, "Where did they hike?", 0.2, 0.0)
    assert [pk for pk, _ in boosted][:2] == ["s1a", "s1b"]
    assert all(0.0 <= score <= 1.0 for _, score in boosted)
    # Off: the same order.
    assert [pk for pk, _ in fusion.boost_conversation(ranked, rows, "q", 0.0, 0.0)] == [
        pk for pk, _ in ranked
    ]


def test_the_one_named_speaker_is_favoured_by_metadata_or_content_prefix():
    ranked = [("bob", 0.80), ("ann", 0.75), ("ann2", 0.10)]
    rows = {
        "bob": row("Bob: I love painting", session=1),
        "ann": row("I paint on weekends", session=2, speaker="Ann"),
        "ann2": row("Ann: hi", session=3),
    }
    named = fusion.boost_conversation(ranked, rows, "What does ann paint?", 0.0, 0.1)
    assert [pk for pk, _ in named][:1] == ["ann"]
    # Both speakers named, or a name inside another word: nobody is favoured.
    both = fusion.boost_conversation(ranked, rows, "Do Ann and Bob paint?", 0.0, 0.1)
    assert [pk for pk, _ in both] == ["bob", "ann", "ann2"]
    inside = fusion.boost_conversation(ranked, rows, "What did Annabel paint?", 0.0, 0.1)
    assert [pk for pk, _ in inside] == ["bob", "ann", "ann2"]


def test_a_statement_and_a_longer_turn_rank_above_a_question_and_small_talk():
    ranked = [("asks", 0.8), ("short", 0.8), ("tells", 0.8)]
    rows = {
        "asks": row("Ann: did you ever go to Lisbon with your sister last year?", session=1),
        "short": row("Bob: haha same", session=2),
        "tells": row("Bob: we drove to Lisbon in May and stayed a week", session=3),
    }
    statements = fusion.boost_conversation(ranked, rows, "Who went to Lisbon?", 0, 0, 0.3, 0)
    assert [pk for pk, _ in statements][-1] == "asks"
    longer = fusion.boost_conversation(ranked, rows, "Who went to Lisbon?", 0, 0, 0, 0.45)
    assert [pk for pk, _ in longer][-1] == "short"
    both = fusion.boost_conversation(ranked, rows, "Who went to Lisbon?", 0.2, 0.45, 0.3, 0.45)
    assert both[0][0] == "tells"
    assert all(0.0 <= score <= 1.0 for _, score in both)
    # A turn of 400 characters or more gains the whole weight, no more.
    long_rows = {"a": row("x" * 400, session=1), "b": row("x" * 4000, session=1)}
    capped = dict(fusion.boost_conversation([("a", 0.5), ("b", 0.5)], long_rows, "q", 0, 0, 0, 1))
    assert capped["a"] == capped["b"] == 0.75
    # Records that name no session are ranked as they were.
    plain = {pk: row(rows[pk]["content"]) for pk in rows}
    assert fusion.boost_conversation(ranked, plain, "q", 0.2, 0.45, 0.3, 0.45) == ranked


def test_a_colon_that_is_not_a_speaker_is_not_one():
    assert fusion.speaker_of(row("Note: 3 items")) == "Note"  # a name-like prefix
    assert fusion.speaker_of(row("10:30 meeting")) is None
    assert fusion.speaker_of(row("no colon here")) is None
    assert fusion.speaker_of(row("x", speaker="  ")) is None


@pytest.mark.django_db
def test_the_query_service_ranks_a_sessions_turns_together(tenant, other_tenant, committed):
    start = datetime(2026, 1, 5, 18, tzinfo=UTC)
    turns = [
        ("Caroline: I went to the LGBTQ support group yesterday.", 1),
        ("Melanie: that sounds powerful, how was it?", 1),
        ("Caroline: the transgender stories were so inspiring.", 1),
        ("Melanie: support group for runners meets on Sundays.", 2),
        ("Caroline: yesterday I painted a sunrise.", 3),
    ]
    items = [
        {
            "content": text,
            "kind": "episodic",
            "namespace": "conv",
            "metadata": {"session": session},
            "occurred_at": (start + timedelta(days=session, minutes=n)).isoformat(),
        }
        for n, (text, session) in enumerate(turns)
    ]
    committed(write.write, tenant.scope, items)
    committed(write.write, other_tenant.scope, items)
    question = "What did Caroline say about the support group?"

    def ask() -> list[str]:
        found = query.query(tenant.scope, query=question, namespaces=["conv"], k=5)
        assert all(0.0 <= (item.score or 0.0) <= 1.0 for item in found.items)
        return [item.content for item in found.items]

    with override_settings(MEMORYHUB={**settings.MEMORYHUB, **OFF}):
        memoryhub_settings.reload()
        plain = ask()
    with override_settings(
        MEMORYHUB={**settings.MEMORYHUB, **OFF, "SESSION_BOOST": 1.0, "SPEAKER_BOOST": 0.5}
    ):
        memoryhub_settings.reload()
        boosted = ask()
    memoryhub_settings.reload()
    runners = "Melanie: support group for runners meets on Sundays."
    # The other session's turn that shares the words falls behind the named speaker's
    # turns of the session that tells the story.
    assert plain.index(runners) < plain.index(turns[2][0])
    assert boosted.index(runners) > boosted.index(turns[2][0])
    assert boosted[0] == turns[0][0]


@pytest.mark.django_db
def test_the_query_service_prefers_the_turn_that_tells(tenant, other_tenant, committed):
    start = datetime(2026, 2, 1, 9, tzinfo=UTC)
    turns = [
        "Ann: did the kayak trip happen?",
        "Bob: kayak",
        "Bob: yes, the kayak trip on the fjord took us three days and one capsized canoe",
    ]
    items = [
        {
            "content": text,
            "kind": "episodic",
            "namespace": "conv",
            "metadata": {"session": n + 1},
            "occurred_at": (start + timedelta(days=n)).isoformat(),
        }
        for n, text in enumerate(turns)
    ]
    committed(write.write, tenant.scope, items)
    committed(
        write.write,
        other_tenant.scope,
        [{**item, "content": "x " + item["content"]} for item in items],
    )

    def ask(**weights: float) -> list[str]:
        with override_settings(MEMORYHUB={**settings.MEMORYHUB, **OFF, **weights}):
            memoryhub_settings.reload()
            found = query.query(tenant.scope, query="kayak trip", namespaces=["conv"], k=3)
        memoryhub_settings.reload()
        assert all(not item.content.startswith("x ") for item in found.items)
        return [item.content for item in found.items]

    assert ask()[0] != turns[2]
    assert ask(STATEMENT_BOOST=0.3, LENGTH_BOOST=0.45)[0] == turns[2]
    # The defaults rank it first too (asked after the same query without the weights:
    # they are part of the cache key).
    found = query.query(tenant.scope, query="kayak trip", namespaces=["conv"], k=3)
    assert found.items[0].content == turns[2]
