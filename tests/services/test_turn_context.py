"""``TURN_CONTEXT``: a conversation turn's vector holds the turn before it, and forgetting
that turn embeds the next one again without it (no vector keeps what was erased)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from django.conf import settings
from django.test import override_settings

from memoryhub.conf import memoryhub_settings
from memoryhub.models import MemoryRecord
from memoryhub.services import forget, write

pytestmark = pytest.mark.django_db

START = datetime(2026, 2, 1, 9, tzinfo=UTC)
TURNS = ["Ann: did you ever go back to Lisbon?", "Bob: yes, last May.", "Ann: lovely!"]


@pytest.fixture
def turn_context():
    with override_settings(MEMORYHUB={**settings.MEMORYHUB, "TURN_CONTEXT": True}):
        memoryhub_settings.reload()
        yield
    memoryhub_settings.reload()


def converse(committed, tenant) -> list[str]:
    items = [
        {
            "content": text,
            "kind": "episodic",
            "namespace": "conv",
            "metadata": {"session": 1},
            "occurred_at": (START + timedelta(minutes=n)).isoformat(),
        }
        for n, text in enumerate(TURNS)
    ]
    return [r.id for r in committed(write.write, tenant.scope, items).records]


def unit(vector) -> np.ndarray:
    array = np.asarray(vector, dtype=float)
    return array / np.linalg.norm(array)


def test_a_turn_is_embedded_with_the_turn_before_it(turn_context, committed, tenant):
    ids = converse(committed, tenant)
    first, second, third = (MemoryRecord.unscoped.get(pk=pk) for pk in ids)
    embedder = memoryhub_settings.embedder()
    alone = embedder.embed_documents([TURNS[1]])[0]
    together = embedder.embed_documents([f"{TURNS[0]}\n{TURNS[1]}"])[0]
    assert [first.context_embedded, second.context_embedded, third.context_embedded] == [
        False,
        True,
        True,
    ]
    assert np.allclose(unit(second.embedding), unit(np.add(alone, together)), atol=1e-5)
    assert np.allclose(first.embedding, embedder.embed_documents([TURNS[0]])[0], atol=1e-5)


def test_forgetting_a_turn_embeds_the_next_one_again_without_it(
    turn_context, committed, tenant, other_tenant
):
    ids = converse(committed, tenant)
    theirs = converse(committed, other_tenant)
    committed(forget.forget_record, tenant.scope, ids[0])
    second = MemoryRecord.unscoped.get(pk=ids[1])
    plain = memoryhub_settings.embedder().embed_documents([TURNS[1]])[0]
    assert second.status == "indexed" and second.context_embedded is False
    assert np.allclose(second.embedding, plain, atol=1e-5)
    # The third turn's previous turn is still there: untouched.
    assert MemoryRecord.unscoped.get(pk=ids[2]).context_embedded is True
    # The other org's conversation keeps its vectors.
    assert MemoryRecord.unscoped.get(pk=theirs[1]).context_embedded is True


def test_without_the_setting_a_turn_is_embedded_alone(committed, tenant):
    ids = converse(committed, tenant)
    second = MemoryRecord.unscoped.get(pk=ids[1])
    plain = memoryhub_settings.embedder().embed_documents([TURNS[1]])[0]
    assert second.context_embedded is False
    assert np.allclose(second.embedding, plain, atol=1e-5)
