"""The admin's doors to time-scoped facts: adding a successor that supersedes the current
record of a key, a fact's timeline on its page, the validity filter; never another org's
chain."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from memoryhub.models import MemoryRecord
from memoryhub.services import knowledge_bases, updates, write
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client, tenant):
    user = MembershipFactory(org=tenant.org, user__is_staff=True).user
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label__in=["memoryhub", "tenants"])
    )
    client.force_login(user)
    return client


def city(content: str, when: str) -> dict:
    item = {"content": content, "key": "city", "namespace": "user:bob"}
    return {**item, "valid_from": when, "supersede": True}


def add_successor(operator, tenant, content: str, day: str):
    """The admin's add form: ``content`` under bob's key "city", superseding, from ``day``."""
    kb = knowledge_bases.ensure_knowledge_base(tenant.scope, "memory")
    return operator.post(
        "/admin/memoryhub/memoryrecord/add/",
        {
            "knowledge_base": kb.pk,
            "namespace": "user:bob",
            "key": "city",
            "kind": "semantic",
            "content": content,
            "tags": "",
            "metadata": "{}",
            "valid_from_0": day,
            "valid_from_1": "00:00:00",
            "supersede": "on",
        },
    )


def test_an_operator_supersedes_a_fact_and_reads_its_timeline(operator, tenant, other_tenant):
    paris = write.write(tenant.scope, [city("Bob lives in Paris", "2026-01-01")]).records[0].id
    theirs = write.write(other_tenant.scope, [city("globex secret city", "2026-01-01")])
    response = add_successor(operator, tenant, "Bob lives in Lyon", "2026-05-01")
    assert response.status_code == 302, response.content.decode()[:3000]
    lyon = MemoryRecord.unscoped.get(content="Bob lives in Lyon")
    old = MemoryRecord.unscoped.get(pk=paris)
    assert old.superseded_by == lyon.pk and old.valid_until == lyon.valid_from
    assert old.key == lyon.key == "city"

    page = operator.get(f"/admin/memoryhub/memoryrecord/{paris}/change/").content.decode()
    assert 'id="mh-timeline"' in page
    timeline = page[page.index('id="mh-timeline"') :]
    assert timeline.index("Bob lives in Paris") < timeline.index("Bob lives in Lyon")
    assert "still true" in timeline and "globex" not in page

    listed = operator.get("/admin/memoryhub/memoryrecord/?validity=now").content.decode()
    assert "Bob lives in Lyon" in listed and "Bob lives in Paris" not in listed
    closed = operator.get("/admin/memoryhub/memoryrecord/?validity=closed").content.decode()
    assert "Bob lives in Paris" in closed and "Bob lives in Lyon" not in closed
    # Another org's chain: its page is not found; its record is in no list of ours.
    foreign = theirs.records[0].id
    assert operator.get(f"/admin/memoryhub/memoryrecord/{foreign}/change/").status_code == 302
    assert "globex secret city" not in closed + listed


def test_a_successor_starting_too_early_is_a_form_error(operator, tenant):
    write.write(tenant.scope, [city("Bob lives in Paris", "2026-03-01")])
    response = add_successor(operator, tenant, "Bob lives in Lyon", "2026-01-01")
    assert response.status_code == 200
    assert "must be later than when the record it supersedes became true" in (
        response.content.decode()
    )
    assert not MemoryRecord.unscoped.filter(content="Bob lives in Lyon").exists()


def test_reopening_a_superseded_fact_is_a_form_error_and_restoring_keeps_it_closed(
    operator, tenant, other_tenant
):
    paris = write.write(tenant.scope, [city("Bob lives in Paris", "2026-01-01")]).records[0].id
    assert add_successor(operator, tenant, "Bob lives in Lyon", "2026-05-01").status_code == 302
    theirs = write.write(other_tenant.scope, [city("globex city", "2026-01-01")]).records[0].id
    change = f"/admin/memoryhub/memoryrecord/{paris}/change/"
    form = {
        "key": "city",
        "kind": "semantic",
        "content": "Bob lives in Paris",
        "tags": "",
        "metadata": "{}",
        "valid_from_0": "2026-01-01",
        "valid_from_1": "00:00:00",
        "valid_until_0": "",
        "valid_until_1": "",
    }
    response = operator.post(change, form)
    assert response.status_code == 200
    assert "a superseded record stays closed" in response.content.decode()
    assert MemoryRecord.unscoped.get(pk=paris).valid_until is not None
    # The history's restore of the open first state keeps the fact closed.
    restored = operator.post(f"/admin/memoryhub/memoryrecord/{paris}/restore/1/")
    assert restored.status_code == 302
    old = MemoryRecord.unscoped.get(pk=paris)
    assert old.valid_until is not None and old.superseded_by is not None
    # Another org's record is no page of ours.
    assert operator.post(f"/admin/memoryhub/memoryrecord/{theirs}/change/", form).status_code in (
        302,
        404,
    )
    assert MemoryRecord.unscoped.get(pk=theirs).valid_until is None


def test_a_version_whose_key_is_taken_now_is_said_not_a_500(operator, tenant):
    kb = knowledge_bases.ensure_knowledge_base(tenant.scope, "memory")
    first = write.write(tenant.scope, [{"content": "a", "key": "k1"}]).records[0].id
    updates.update_record(tenant.scope, first, {"key": "k2"}, partial=True)
    write.write(tenant.scope, [{"content": "b", "key": "k1"}])
    response = operator.post(f"/admin/memoryhub/memoryrecord/{first}/restore/1/", follow=True)
    assert response.status_code == 200
    assert "Version 1 cannot be restored" in response.content.decode()
    assert MemoryRecord.unscoped.get(pk=first).key == "k2"
    assert kb.name == "memory"
