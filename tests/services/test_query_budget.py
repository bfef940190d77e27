"""A query's token budget (``max_tokens``) and the ``usage`` every answer reports, through
the service, the REST API and the MCP tool's shared answer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memoryhub.exceptions import ValidationFailed
from memoryhub.items import MemoryItem, Turns
from memoryhub.services import query, write
from memoryhub.services.query import budget, render_grounding
from tests.factories import key_client

pytestmark = pytest.mark.django_db


def item(content: str, **extra) -> MemoryItem:
    return MemoryItem(content=content, source="memory", score=1.0, id=content[:8], **extra)


def tokens(items: list[MemoryItem]) -> int:
    return budget.estimate_tokens(render_grounding(items) or "")


def test_estimate_is_four_characters_a_token_rounded_up():
    assert [budget.estimate_tokens(text) for text in ("", "a", "abcd", "abcde")] == [0, 1, 1, 2]


def test_pack_keeps_the_best_hits_that_fit_and_skips_a_long_one():
    hits = [item("a" * 40), item("b" * 400), item("c" * 40), item("d" * 40)]
    render = lambda chosen: render_grounding(chosen) or ""  # noqa: E731
    packed, truncated = budget.pack(hits, tokens(hits[:1] + hits[2:3]), render)
    assert [hit.content[0] for hit in packed] == ["a", "c"]
    assert truncated is True
    everything, truncated = budget.pack(hits, tokens(hits), render)
    assert everything == hits and truncated is False
    assert budget.pack(hits, 1, render) == ([], True)


def test_pack_adds_context_turns_nearest_first_after_every_hit():
    turns = [item(f"turn {n} " + "x" * 30) for n in range(4)]
    hit = item("the hit " + "y" * 30, context=Turns(tuple(turns[:2]), tuple(turns[2:])))
    other = item("second hit " + "z" * 30)
    render = lambda chosen: render_grounding(chosen) or ""  # noqa: E731
    bare = [item("the hit " + "y" * 30, context=Turns()), other]
    # Room for both hits and two turns: the turn just before and the one just after.
    room = tokens([item("the hit " + "y" * 30, context=Turns((turns[1],), (turns[2],))), other])
    packed, truncated = budget.pack([hit, other], room, render)
    assert truncated is True and tokens(packed) <= room
    first = packed[0]
    assert [t.content for t in first.context.before] == [turns[1].content]
    assert [t.content for t in first.context.after] == [turns[2].content]
    assert packed[1] == other and tokens(bare) < room


def answer(client, **body):
    return client.post("/api/v1/domains/support/query", body, format="json")


def test_every_answer_reports_its_usage_and_a_budget_bounds_it(tenant, other_tenant, committed):
    when = datetime(2026, 3, 1, tzinfo=UTC)
    texts = [f"Refund policy note {n}: " + "details " * (5 + 10 * n) for n in range(6)]
    committed(
        write.write,
        tenant.scope,
        [
            {"content": text, "occurred_at": (when + timedelta(minutes=n)).isoformat()}
            for n, text in enumerate(texts)
        ],
    )
    committed(
        write.write, other_tenant.scope, [{"content": f"Refund policy {n}"} for n in range(9)]
    )
    client = key_client(tenant, can_read=True)
    full = answer(client, query="refund policy note", k=6, mode="keyword").json()
    usage = full["usage"]
    assert usage["items"] == 6 and usage["truncated"] is False and usage["max_tokens"] is None
    assert usage["tokens"] == budget.estimate_tokens(full["grounding"])
    assert usage["records_scanned"] == 6  # ours only: globex's nine are not candidates
    tight = answer(client, query="refund policy note", k=6, mode="keyword", max_tokens=60).json()
    assert tight["usage"]["truncated"] is True
    assert 0 < tight["usage"]["tokens"] <= 60
    assert budget.estimate_tokens(tight["grounding"]) <= 60
    kept = [i["content"] for i in tight["items"]]
    assert kept and set(kept) < {i["content"] for i in full["items"]}
    # Cached answers report it too.
    again = answer(client, query="refund policy note", k=6, mode="keyword", max_tokens=60).json()
    assert again["usage"] == tight["usage"]


@pytest.mark.parametrize("bad", [0, -1, "many", 1.5, True, 10**7])
def test_a_bad_budget_is_a_400_naming_the_field(tenant, bad):
    client = key_client(tenant, can_read=True)
    response = answer(client, query="x", max_tokens=bad)
    assert response.status_code == 400
    assert "max_tokens" in response.json()["errors"]
    with pytest.raises(ValidationFailed):
        query.query(tenant.scope, query="x", max_tokens=bad)
