"""Admin pages at volume: a knowledge base of 20,000 records is a page of its own size,
never one of its records'."""

from __future__ import annotations

import re

import pytest

from memoryhub.models import KnowledgeBase, MemoryRecord, content_hash
from memoryhub.services import knowledge_bases

pytestmark = pytest.mark.django_db

RECORDS = 20_000


def _bulk(knowledge_base: KnowledgeBase, n: int, **fields: object) -> None:
    """Rows straight into the table (the write path is not what is tested here)."""
    MemoryRecord.unscoped.bulk_create(
        (
            MemoryRecord(
                org_id=knowledge_base.org_id,
                domain_id=knowledge_base.domain_id,
                knowledge_base=knowledge_base,
                namespace=f"user:{i % 7}",
                content=f"fact number {i}",
                content_hash=content_hash(f"fact number {i}"),
                **({"status": MemoryRecord.Status.INDEXED} | fields),
            )
            for i in range(n)
        ),
        batch_size=5000,
    )


@pytest.fixture
def big_kb(tenant, other_tenant) -> KnowledgeBase:
    handbook = knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    _bulk(handbook, RECORDS)
    # The same name in another org: none of it is counted on acme's page.
    _bulk(knowledge_bases.ensure_knowledge_base(other_tenant.scope, "handbook"), 11)
    _bulk(handbook, 3, status=MemoryRecord.Status.FAILED)
    return handbook


def test_a_large_knowledge_base_page_is_bounded_and_saves(admin_client, big_kb):
    url = f"/admin/memoryhub/knowledgebase/{big_kb.pk}/change/"
    page = admin_client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    fields = set(re.findall(r'<(?:input|select|textarea)[^>]*name="([^"]+)"', html))
    assert len(fields) < 20, sorted(fields)[:40]
    assert len(html) < 200_000
    assert "fact number" not in html  # counts and links, not rows
    contents = re.search(r'id="kb-records"><a href="([^"]+)">(\d+)</a>', html)
    assert contents is not None and int(contents.group(2)) == RECORDS + 3
    assert f"knowledge_base__id__exact={big_kb.pk}" in contents.group(1)
    assert re.search(r'id="kb-failed"><a href="[^"]+status__exact=failed">3</a>', html)
    assert "user:0</a> (2859)" in html  # the largest namespace first, with its count

    response = admin_client.post(
        url,
        {"name": big_kb.name, "description": "The support handbook", "on_write": "refuse"},
    )
    assert response.status_code == 302, response.content[:2000]
    big_kb.refresh_from_db()
    assert big_kb.description == "The support handbook"
    assert big_kb.read_only is False  # the checkbox was left unticked
    assert MemoryRecord.unscoped.filter(knowledge_base=big_kb).count() == RECORDS + 3


def test_an_org_with_many_members_links_to_them_instead_of_inlining_them(admin_client, tenant):
    from django.contrib.auth import get_user_model

    from tenants.admin import MembershipInline
    from tenants.models import Membership

    users = get_user_model().objects.bulk_create(
        get_user_model()(username=f"member{i}") for i in range(MembershipInline.max_rows + 1)
    )
    Membership.objects.bulk_create(Membership(org=tenant.org, user=user) for user in users)
    url = f"/admin/tenants/org/{tenant.org.pk}/change/"
    html = admin_client.get(url).content.decode()
    assert "member7" not in html and "memberships-TOTAL_FORMS" not in html
    assert f"/admin/tenants/membership/?org__id__exact={tenant.org.pk}" in html
    assert "domains-TOTAL_FORMS" in html  # the one domain stays editable here
    response = admin_client.post(
        url,
        {
            "slug": tenant.org.slug,
            "name": "Acme renamed",
            "is_active": "on",
            "domains-TOTAL_FORMS": "0",
            "domains-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.content[:3000]
    tenant.org.refresh_from_db()
    assert tenant.org.name == "Acme renamed"
    assert Membership.objects.filter(org=tenant.org).count() == MembershipInline.max_rows + 1


def test_the_operator_home_shows_their_domains_only_with_counts_and_buttons(
    client, tenant, other_tenant
):
    from memoryhub.models import Observation
    from memoryhub.services.forget import ForgetRequest, forget
    from tests.factories import MembershipFactory

    handbook = knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    _bulk(handbook, 40)
    _bulk(handbook, 2, status=MemoryRecord.Status.PENDING)
    _bulk(knowledge_bases.ensure_knowledge_base(other_tenant.scope, "handbook"), 5)
    Observation.unscoped.create(
        org_id=tenant.org.pk,
        domain_id=tenant.domain.pk,
        kind=Observation.Kind.MEMORY_WRITE_REFUSED,
        source="handbook",
        count=3,
    )
    forget(tenant.scope, ForgetRequest(namespace="user:0"))
    forget(other_tenant.scope, ForgetRequest(namespace="user:0"))
    for role, erase_button in (("operator", True), ("viewer", False)):
        user = MembershipFactory(org=tenant.org, role=role, user__is_staff=True).user
        client.force_login(user)
        for url in ("/admin/", "/admin/memoryhub/"):
            html = client.get(url).content.decode()
            row = re.search(r'data-domain="acme/support">(.*?)</tr>', html, re.S)
            assert row is not None, html[:3000]
            numbers = re.findall(r'<td class="num">(?:<a[^>]*>)?(\d+)', row.group(1))
            # 42 records less the 7 of user:0 erased (one of them pending); one refusal
            # today (of 3 records: the knowledge base counts it once, and so does this)
            assert numbers[:4] == ["35", "1", "0", "1"], row.group(1)
            assert "globex" not in html
            assert ('id="mh-erase"' in html) is erase_button
            assert ('id="mh-erasures"' in html) is erase_button
            assert 'id="mh-playground"' in html


@pytest.mark.parametrize("url", ["/admin/memoryhub/memoryrecord/", "/admin/memoryhub/observation/"])
def test_the_big_lists_read_no_unbounded_group_or_distinct(admin_client, big_kb, url):
    """At a million rows, the lists' filters and links must not aggregate every row:
    only the paginator's COUNT(*) may read them all (and the observation summary, over
    its 30-day window)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get(url).status_code == 200
    table = "memoryhub_memoryrecord" if "memoryrecord" in url else "memoryhub_observation"
    unbounded = [
        q["sql"]
        for q in queries
        if f'FROM "{table}"' in q["sql"]
        and ("GROUP BY" in q["sql"] or "DISTINCT" in q["sql"])
        and "LIMIT" not in q["sql"]
        and '"created_at" >=' not in q["sql"]
    ]
    assert unbounded == []


def test_a_big_knowledge_bases_namespaces_are_estimated_from_a_sample(
    tenant, other_tenant, monkeypatch, admin_client
):
    from memoryhub.services import records

    handbook = knowledge_bases.ensure_knowledge_base(tenant.scope, "big")
    MemoryRecord.unscoped.bulk_create(
        MemoryRecord(
            org_id=handbook.org_id,
            domain_id=handbook.domain_id,
            knowledge_base=handbook,
            # Interleaved, so every page holds every namespace in the same proportions.
            namespace="big" if i % 10 < 6 else "mid" if i % 10 < 9 else "small",
            content=f"fact {i}",
            content_hash=content_hash(f"fact {i}"),
            status=MemoryRecord.Status.FAILED if i < 5 else MemoryRecord.Status.INDEXED,
        )
        for i in range(3000)
    )
    _bulk(knowledge_bases.ensure_knowledge_base(other_tenant.scope, "big"), 500)  # not counted
    exact = records.knowledge_base_stats(handbook)
    assert (exact["total"], exact["pending"], exact["failed"]) == (3000, 0, 5)
    assert exact["namespaces"] == [("big", 1800), ("mid", 900), ("small", 300)]
    assert exact["namespaces_estimated"] is False
    monkeypatch.setattr(records, "NAMESPACE_EXACT_MAX", 1000)
    monkeypatch.setattr(records, "NAMESPACE_SAMPLE", 1500)
    estimate = records.knowledge_base_stats(handbook)
    assert (estimate["total"], estimate["failed"], estimate["namespaces_estimated"]) == (
        3000,
        5,
        True,
    )
    assert [name for name, _ in estimate["namespaces"]] == ["big", "mid", "small"]
    for (_, guess), (_, truth) in zip(estimate["namespaces"], exact["namespaces"], strict=True):
        assert abs(guess - truth) <= truth * 0.4
    page = admin_client.get(f"/admin/memoryhub/knowledgebase/{handbook.pk}/change/")
    assert "estimated from a sample" in page.content.decode()


def test_the_home_counts_a_big_backlog_only_up_to_its_cap(
    tenant, other_tenant, monkeypatch, admin_client
):
    from memoryhub.services import overview

    _bulk(knowledge_bases.ensure_knowledge_base(tenant.scope, "imports"), 8, status="pending")
    _bulk(knowledge_bases.ensure_knowledge_base(other_tenant.scope, "imports"), 2, status="pending")
    _bulk(knowledge_bases.ensure_knowledge_base(other_tenant.scope, "other"), 1, status="failed")
    html = admin_client.get("/admin/").content.decode()
    row = re.search(r'data-domain="acme/support">(.*?)</tr>', html, re.S).group(1)
    assert re.findall(r'<td class="num">(?:<a[^>]*>)?([\d+]+)', row)[:3] == ["8", "8", "0"]
    monkeypatch.setattr(overview, "UNINDEXED_CAP", 5)
    html = admin_client.get("/admin/").content.decode()
    acme = re.search(r'data-domain="acme/support">(.*?)</tr>', html, re.S).group(1)
    globex = re.search(r'data-domain="globex/support">(.*?)</tr>', html, re.S).group(1)
    assert re.findall(r'<td class="num">(?:<a[^>]*>)?([\d+]+)', acme)[:3] == ["8", "5+", "0"]
    assert re.findall(r'<td class="num">(?:<a[^>]*>)?([\d+]+)', globex)[:3] == ["3", "2", "1"]
