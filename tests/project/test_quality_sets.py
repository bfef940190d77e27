"""The conversational sets of ``python -m benchmarks.quality`` are what they say (no
database): the timeline set is deterministic, its evidence exists and points at the
right statement of a fact that changed, its moments lie inside the conversation; the
bootstrap interval brackets the mean; the weight-transfer line picks as it says."""

from __future__ import annotations

import statistics
from collections import Counter
from functools import cache

from benchmarks.conversations import Conversation, Question, generate, generate_timeline
from benchmarks.quality import bootstrap_ci, transfer


@cache
def timeline() -> tuple[Conversation, ...]:
    return tuple(generate_timeline())


def by_id(conversation: Conversation) -> dict:
    return {turn.id: turn for turn in conversation.turns}


def statements(conversation: Conversation) -> dict[str, list[str]]:
    """Each fact's statements, oldest first, by key."""
    chains: dict[str, list[str]] = {}
    for key, turn_id in conversation.facts:
        chains.setdefault(key, []).append(turn_id)
    return chains


def test_the_timeline_set_is_deterministic_and_of_the_intended_size():
    first, again = timeline(), generate_timeline()
    assert [(c.id, c.turns, c.questions, c.facts) for c in first] == [
        (c.id, c.turns, c.questions, c.facts) for c in again
    ]
    assert generate_timeline(seed=24)[0].turns != first[0].turns
    assert 8 <= len(first) <= 10
    for conversation in first:
        assert 300 <= len(conversation.turns) <= 600
        assert 40 <= len(conversation.questions) <= 80
        assert len({turn.id for turn in conversation.turns}) == len(conversation.turns)
        times = [turn.occurred_at for turn in conversation.turns]
        assert times == sorted(times) and len(set(times)) == len(times)
        assert len({turn.session for turn in conversation.turns}) >= 20
        assert len({turn.speaker for turn in conversation.turns}) == 2
    categories = Counter(q.category for c in first for q in c.questions)
    assert set(categories) == {
        "single-hop",
        "temporal",
        "supersession-current",
        "supersession-past",
        "multi-hop",
        "as-of",
    }
    assert min(categories.values()) >= 30


def test_every_question_has_evidence_in_its_conversation():
    for conversation in (*timeline(), *generate()):
        turns = by_id(conversation)
        for question in conversation.questions:
            assert question.evidence and set(question.evidence) <= set(turns), question
            assert len(set(question.evidence)) == len(question.evidence)
        if conversation.facts:
            assert {turn_id for _, turn_id in conversation.facts} <= set(turns)


def test_supersession_questions_point_at_the_latest_and_the_earlier_statement():
    for conversation in timeline():
        turns = by_id(conversation)
        chains = statements(conversation)
        order = [turn_id for _, turn_id in conversation.facts]
        assert order == sorted(order, key=lambda t: turns[t].occurred_at)
        chain_of = {turn_id: chain for chain in chains.values() for turn_id in chain}
        seen = Counter()
        for question in conversation.questions:
            [turn_id, *_] = question.evidence
            if question.category == "supersession-current":
                chain = chain_of[turn_id]
                # The latest statement of a fact that changed.
                assert len(chain) >= 2 and chain[-1] == turn_id
            elif question.category == "supersession-past":
                chain = chain_of[turn_id]
                # An earlier statement, and the value asked "before" is the next one's.
                position = chain.index(turn_id)
                assert position < len(chain) - 1
                successor = turns[chain[position + 1]].text
                named = question.text.rstrip("?").split(" ")[-1]
                assert named in successor, (question, successor)
            elif question.category == "temporal":
                chain = chain_of[turn_id]
                assert chain.index(turn_id) >= 1  # a change, not the opening value
            elif question.category == "single-hop":
                assert len(chain_of[turn_id]) == 1
            seen[question.category] += 1
        assert seen["supersession-current"] and seen["supersession-past"]


def test_as_of_moments_fall_inside_the_conversation_and_the_statements_validity():
    for conversation in timeline():
        turns = by_id(conversation)
        start, end = conversation.turns[0].occurred_at, conversation.turns[-1].occurred_at
        chain_of = {t: chain for chain in statements(conversation).values() for t in chain}
        as_of = [q for q in conversation.questions if q.as_of is not None]
        assert as_of and all(q.category == "as-of" for q in as_of)
        for question in as_of:
            assert start < question.as_of < end
            [turn_id] = question.evidence
            chain = chain_of[turn_id]
            position = chain.index(turn_id)
            # The statement is the one in force at the moment, the month named is whole
            # within its validity.
            assert turns[turn_id].occurred_at <= question.as_of.replace(day=1, hour=0)
            if position + 1 < len(chain):
                assert question.as_of.replace(day=28) < turns[chain[position + 1]].occurred_at
            assert f"{question.as_of:%B %Y}" in question.text


def test_multi_hop_questions_span_two_sessions():
    for conversation in timeline():
        turns = by_id(conversation)
        for question in conversation.questions:
            if question.category == "multi-hop":
                event, held = (turns[t] for t in question.evidence)
                assert held.session < event.session


def test_existing_callers_of_question_keep_working():
    question = Question("q", ("D1:1",), "single-hop")
    assert question.as_of is None
    assert all(q.as_of is None for c in generate() for q in c.questions)


def test_bootstrap_interval_brackets_the_mean_and_is_repeatable():
    values = [1.0] * 30 + [0.0] * 20 + [0.5] * 10
    low, high = bootstrap_ci(values)
    assert low < statistics.fmean(values) < high
    assert high - low < 0.3
    assert bootstrap_ci(values) == (low, high)
    assert bootstrap_ci([1.0] * 5) == (1.0, 1.0)
    wider = bootstrap_ci(values[::6])
    assert wider[1] - wider[0] > high - low


def test_weights_are_chosen_on_one_set_and_reported_on_the_other():
    def run(name, study):
        return {"set": name, "embedder": "e", "fusion_study": {f: {"all": v} for f, v in study}}

    runs = [
        run("generated", [("a", 0.9), ("b", 0.5)]),
        run("timeline", [("a", 0.4), ("b", 0.6)]),
    ]
    found = transfer(runs)
    assert [(t["chosen_on"], t["fusion"], t["reported_on"], t["score"]) for t in found] == [
        ("timeline", "b", "generated", 0.5),
        ("generated", "a", "timeline", 0.4),
    ]
    assert [(t["best"], t["best_fusion"]) for t in found] == [(0.9, "a"), (0.6, "b")]
    # With LoCoMo at hand, the pair is timeline and LoCoMo.
    found = transfer([*runs, run("LoCoMo", [("a", 0.1), ("b", 0.2)])])
    assert {t["reported_on"] for t in found} == {"timeline", "LoCoMo"}
