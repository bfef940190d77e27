"""Time-scoped facts: a write that supersedes closes the current record of its key and
links it to its successor; queries read what is valid now or ``as_of`` a moment; a
fact's timeline; forgetting a fact forgets its chain."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memoryhub.exceptions import RecordNotFound, ValidationFailed
from memoryhub.models import MemoryRecord, RecordVersion
from memoryhub.scope import tenant_scope
from memoryhub.services import forget, history, query, supersession, updates, write
from memoryhub.services.forget import ForgetRequest

pytestmark = pytest.mark.django_db

JAN = datetime(2026, 1, 10, tzinfo=UTC)
MAR = datetime(2026, 3, 1, tzinfo=UTC)
JUN = datetime(2026, 6, 1, tzinfo=UTC)
NS = "user:alice"


def employer(content: str, when: datetime, **extra):
    return {
        "content": content,
        "key": "employer",
        "namespace": NS,
        "valid_from": when.isoformat(),
        "supersede": True,
        **extra,
    }


def chain(committed, tenant):
    """Alice worked at Initech from January, Acme from March, Globex from June."""
    ids = []
    for content, when in (
        ("Alice works at Initech", JAN),
        ("Alice works at Acme", MAR),
        ("Alice works at Globex", JUN),
    ):
        result = committed(write.write, tenant.scope, [employer(content, when)])
        ids.append(result.records[0].id)
    return ids


def correct_globex(committed, tenant):
    """An overwrite of the employer by key, without ``supersede``: a correction."""
    committed(
        write.write,
        tenant.scope,
        [{"content": "Alice works at Globex Corp", "key": "employer", "namespace": NS}],
    )


def ask(tenant, **extra):
    found = query.query(
        tenant.scope, query="Where does Alice work?", namespaces=[NS], mode="keyword", **extra
    )
    return [item.content for item in found.items]


def stored(tenant, pk):
    with tenant_scope(tenant.scope):
        return MemoryRecord.objects.get(pk=pk)


def test_supersede_closes_the_current_fact_and_links_it_to_its_successor(committed, tenant):
    initech, acme, globex = chain(committed, tenant)
    first, second, third = (stored(tenant, pk) for pk in (initech, acme, globex))
    # Every link keeps its key, content and embedding; only the last is current.
    assert [r.key for r in (first, second, third)] == ["employer"] * 3
    assert (first.valid_from, first.valid_until, str(first.superseded_by)) == (JAN, MAR, acme)
    assert (second.valid_from, second.valid_until, str(second.superseded_by)) == (MAR, JUN, globex)
    assert (third.valid_from, third.valid_until, third.superseded_by) == (JUN, None, None)
    assert first.status == "indexed" and first.content == "Alice works at Initech"
    # Closing is a change of the old record, kept in its history.
    with tenant_scope(tenant.scope):
        version = RecordVersion.objects.get(record_id=first.pk)
    assert version.valid_until is None
    assert first.change_cause == RecordVersion.Cause.SUPERSEDE
    assert history.history(tenant.scope, first.pk)["versions"][0]["valid_until"] == MAR


def test_queries_read_what_is_valid_now_or_as_of_a_moment(committed, tenant):
    chain(committed, tenant)
    assert ask(tenant) == ["Alice works at Globex"]
    assert ask(tenant, as_of=(JAN + timedelta(days=1)).isoformat()) == ["Alice works at Initech"]
    # valid_from is inclusive, valid_until exclusive: at the boundary, the successor.
    assert ask(tenant, as_of=MAR.isoformat()) == ["Alice works at Acme"]
    assert ask(tenant, as_of=(MAR - timedelta(microseconds=1)).isoformat()) == [
        "Alice works at Initech"
    ]
    assert ask(tenant, as_of="2026-06-01") == ["Alice works at Globex"]
    # Before anything was true, nothing.
    assert ask(tenant, as_of="2025-12-31") == []


def test_as_of_does_not_know_what_was_said_later(committed, tenant):
    committed(
        write.write,
        tenant.scope,
        [{"content": "Alice moved to Lisbon", "namespace": NS, "occurred_at": "2026-05-01"}],
    )
    found = query.query(tenant.scope, query="Lisbon", namespaces=[NS], mode="keyword")
    assert len(found.items) == 1
    assert ask(tenant, as_of="2026-04-30") == []
    item = found.items[0]
    assert (item.valid_from, item.valid_until, item.superseded_by) == (None, None, None)


def test_a_later_fact_that_says_the_same_is_no_supersession(committed, tenant):
    [initech] = chain(committed, tenant)[:1]
    again = committed(write.write, tenant.scope, [employer("Alice works at Globex", JUN)])
    with tenant_scope(tenant.scope):
        assert MemoryRecord.objects.filter(key="employer").count() == 3
    assert stored(tenant, again.records[0].id).valid_from == JUN
    assert stored(tenant, initech).valid_until == MAR


def test_a_successor_cannot_start_before_what_it_replaces(committed, tenant):
    chain(committed, tenant)
    with pytest.raises(ValidationFailed) as caught:
        write.write(
            tenant.scope,
            [
                {"content": "unrelated", "namespace": NS},
                employer("Alice works at Hooli", MAR),
            ],
        )
    assert list(caught.value.errors) == ["items[1].valid_from"]
    with tenant_scope(tenant.scope):
        assert not MemoryRecord.objects.filter(content__in=["unrelated", "Alice works at Hooli"])
        assert MemoryRecord.objects.get(key="employer", superseded_by=None).valid_until is None


def test_an_overwrite_by_key_is_still_a_correction(committed, tenant):
    _, _, globex = chain(committed, tenant)
    correct_globex(committed, tenant)
    corrected = stored(tenant, globex)
    assert corrected.content == "Alice works at Globex Corp"
    assert corrected.change_cause == RecordVersion.Cause.UPSERT
    with tenant_scope(tenant.scope):
        assert MemoryRecord.objects.filter(key="employer").count() == 3


def test_supersede_needs_a_key_and_validity_must_be_ordered(tenant):
    with pytest.raises(ValidationFailed) as caught:
        write.write(
            tenant.scope,
            [
                {"content": "x", "supersede": True},
                {"content": "y", "valid_from": "2026-02-01", "valid_until": "2026-01-01"},
                {"content": "z", "supersede": "yes", "key": "k"},
                {"content": "w", "valid_from": "March"},
            ],
        )
    assert sorted(caught.value.errors) == [
        "items[0].supersede",
        "items[1].valid_until",
        "items[2].supersede",
        "items[3].valid_from",
    ]


def test_closing_a_fact_without_a_successor(committed, tenant):
    _, _, globex = chain(committed, tenant)
    committed(
        updates.update_record, tenant.scope, globex, {"valid_until": "2026-07-01"}, partial=True
    )
    assert ask(tenant) == []
    assert ask(tenant, as_of="2026-06-15") == ["Alice works at Globex"]


def test_timeline_is_the_chain_oldest_first_from_any_link(committed, tenant, other_tenant):
    ids = chain(committed, tenant)
    for pk in ids:
        links = supersession.timeline(tenant.scope, pk)
        assert [link["id"] for link in links] == ids
    assert [link["valid_until"] for link in links] == [MAR, JUN, None]
    with pytest.raises(RecordNotFound):
        supersession.timeline(other_tenant.scope, ids[0])


def test_forgetting_a_fact_forgets_what_it_superseded(committed, tenant):
    initech, acme, globex = chain(committed, tenant)
    result = committed(forget.forget_record, tenant.scope, acme)
    assert result.deleted == 2
    with tenant_scope(tenant.scope):
        assert list(MemoryRecord.objects.values_list("pk", flat=True)) == [
            MemoryRecord.objects.get(pk=globex).pk
        ]
    result = committed(forget.forget, tenant.scope, ForgetRequest(key="employer", namespace=NS))
    assert result.deleted == 1


def test_erasing_a_subject_leaves_no_link_of_the_chain(committed, tenant, other_tenant):
    chain(committed, tenant)
    theirs = chain(committed, other_tenant)
    result = committed(forget.forget, tenant.scope, ForgetRequest(namespace=NS))
    assert result.deleted == 3
    assert not MemoryRecord.unscoped.filter(org_id=tenant.org.pk).exists()
    assert not RecordVersion.unscoped.filter(org_id=tenant.org.pk).exists()
    # The other org's chain is whole, and its queries never saw ours.
    assert [link["id"] for link in supersession.timeline(other_tenant.scope, theirs[0])] == theirs
    assert ask(other_tenant, as_of="2026-03-02") == ["Alice works at Acme"]


def test_another_orgs_as_of_query_sees_none_of_ours(committed, tenant, other_tenant):
    chain(committed, tenant)
    assert ask(other_tenant) == []
    assert ask(other_tenant, as_of="2026-03-02") == []


def test_listing_by_key_gives_the_current_holder(committed, tenant):
    from memoryhub.services import records

    _, _, globex = chain(committed, tenant)
    by_key = records.list_records(tenant.scope, {"namespace": NS, "key": "employer"})
    assert [str(r.pk) for r in by_key] == [globex]
    keyed = records.list_records(tenant.scope, {"namespace": NS, "key_prefix": ""})
    assert [str(r.pk) for r in keyed] == [globex]
    assert len(records.list_records(tenant.scope, {"namespace": NS})) == 3


def test_a_correction_keeps_when_the_fact_became_true(committed, tenant):
    _, acme, globex = chain(committed, tenant)
    correct_globex(committed, tenant)
    assert stored(tenant, globex).valid_from == JUN
    assert ask(tenant, as_of="2026-06-02") == ["Alice works at Globex Corp"]
    assert stored(tenant, acme).valid_until == JUN


def test_a_superseded_fact_stays_closed_through_an_update_or_a_restore(
    committed, tenant, other_tenant
):
    initech, acme, _ = chain(committed, tenant)
    # A correction of what the closed fact said keeps it closed (version 1 is its
    # first state, open before Acme superseded it).
    committed(
        updates.update_record, tenant.scope, initech, {"content": "Alice: Initech"}, partial=True
    )
    committed(updates.restore_version, tenant.scope, initech, 1)
    first = stored(tenant, initech)
    assert first.content == "Alice works at Initech"
    assert (first.valid_from, first.valid_until, str(first.superseded_by)) == (JAN, MAR, acme)
    assert ask(tenant, as_of=(MAR + timedelta(days=1)).isoformat()) == ["Alice works at Acme"]
    # Reopening it, or ending it after its successor began, is refused by name.
    for until in (None, (MAR + timedelta(days=1)).isoformat()):
        with pytest.raises(ValidationFailed) as refused:
            updates.update_record(tenant.scope, initech, {"valid_until": until}, partial=True)
        assert "valid_until" in refused.value.errors
    assert stored(tenant, initech).valid_until == MAR
    # Ending it earlier is a correction like any other; the other org cannot reach it.
    committed(
        updates.update_record,
        tenant.scope,
        initech,
        {"valid_until": "2026-02-01T00:00:00Z"},
        partial=True,
    )
    assert stored(tenant, initech).valid_until == datetime(2026, 2, 1, tzinfo=UTC)
    with pytest.raises(RecordNotFound):
        updates.restore_version(other_tenant.scope, initech, 1)
