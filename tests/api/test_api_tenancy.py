"""Cross-tenant matrix: every route × method, probed by keys of another tenant.

Two orgs with two domains each; keys bound to a domain and unbound. Every probe of the
other org's domains, record ids and keys returns 404 or 403, returns none of its
content, and changes nothing.
"""

from __future__ import annotations

import itertools

import pytest
from rest_framework.test import APIClient

from memoryhub.models import KnowledgeBase, MemoryRecord
from memoryhub.scope import Scope
from memoryhub.services import knowledge_bases, write
from tests.factories import DomainFactory, OrgFactory, create_api_key

pytestmark = pytest.mark.django_db

SECRET = "globex-secret-{domain}"


#: acme's domains, and globex's: one slug in common ("support"), one of its own ("legal").
DOMAINS = {"acme": ("support", "sales"), "globex": ("support", "legal")}


@pytest.fixture
def world():
    orgs = {slug: OrgFactory(slug=slug) for slug in DOMAINS}
    domains = {
        (org_slug, slug): DomainFactory(org=orgs[org_slug], slug=slug)
        for org_slug, slugs in DOMAINS.items()
        for slug in slugs
    }
    records = {}
    for (org_slug, slug), domain in domains.items():
        scope = Scope.for_domain(domain)
        knowledge_bases.ensure_knowledge_base(scope, "handbook")
        content = SECRET.format(domain=slug) if org_slug == "globex" else f"acme-{slug}"
        [record] = write.write(
            scope, [{"content": content, "key": "shared-key", "namespace": "user:alice"}]
        ).records
        records[(org_slug, slug)] = record.id
    everything = {"can_read": True, "can_write": True, "can_forget": True, "can_export": True}
    keys = {
        "acme-unbound": create_api_key(org=orgs["acme"], **everything)[1],
        "acme-support": create_api_key(
            org=orgs["acme"], domain=domains[("acme", "support")], **everything
        )[1],
    }
    return domains, records, keys


def requests(domain: str, record_id: str) -> list[tuple[str, str, dict | None]]:
    base = f"/api/v1/domains/{domain}"
    item = {"content": "intruder", "key": "shared-key", "namespace": "user:alice"}
    return [
        ("get", f"{base}/records", None),
        ("post", f"{base}/records", {"items": [item]}),
        ("post", f"{base}/query", {"query": "secret", "namespaces": ["user:alice"]}),
        ("post", f"{base}/forget", {"all": True}),
        ("post", f"{base}/export", {"namespace": "user:alice"}),
        ("get", f"{base}/sources", None),
        ("get", f"{base}/namespaces", {"delimiter": "/"}),
        ("get", f"{base}/records/{record_id}", None),
        ("put", f"{base}/records/{record_id}", {"content": "hijacked"}),
        ("patch", f"{base}/records/{record_id}", {"content": "hijacked"}),
        ("delete", f"{base}/records/{record_id}", None),
    ]


def snapshot() -> list[tuple]:
    return sorted(
        MemoryRecord.unscoped.values_list("id", "content", "key", "status", "updated_at")
    ) + sorted(KnowledgeBase.unscoped.values_list("id", "name", "refused_writes"))


def call(client: APIClient, method: str, path: str, body: dict | None):
    if body is None:
        return getattr(client, method)(path)
    return getattr(client, method)(path, body, format="json")


def test_no_probe_of_another_tenant_leaks_or_changes_anything(world):
    domains, records, keys = world
    before = snapshot()
    probes = 0
    for key_name, key in keys.items():
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
        # Domains the key cannot see: another org's own slug, and (for the bound key)
        # the other domain of its own org.
        hidden = ["legal"] + (["sales"] if key_name == "acme-support" else [])
        for slug, foreign in itertools.product(
            hidden, [("globex", "support"), ("globex", "legal")]
        ):
            for method, path, body in requests(slug, str(records[foreign])):
                response = call(client, method, path, body)
                probes += 1
                assert response.status_code == 404, (key_name, method, path, response.status_code)
                assert response.json()["code"] == "domain_not_found"
                assert "globex-secret" not in response.content.decode()
    assert probes == 11 * 2 + 11 * 4
    assert snapshot() == before


def test_foreign_record_ids_are_404_through_the_keys_own_domain(world):
    domains, records, keys = world
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {keys['acme-unbound']}")
    before = snapshot()
    for foreign in ("support", "legal"):
        record_id = records[("globex", foreign)]
        for method in ("get", "put", "patch", "delete"):
            body = None if method in ("get", "delete") else {"content": "hijacked"}
            response = call(client, method, f"/api/v1/domains/support/records/{record_id}", body)
            assert response.status_code == 404, (method, response.status_code)
            assert "globex-secret" not in response.content.decode()
    assert snapshot() == before


def test_own_domain_queries_never_return_the_other_orgs_records(world):
    domains, records, keys = world
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {keys['acme-unbound']}")
    for slug in ("support", "sales"):
        listing = client.get(f"/api/v1/domains/{slug}/records").content.decode()
        found = client.post(
            f"/api/v1/domains/{slug}/query",
            {"query": "globex secret", "namespaces": ["user:alice"], "mode": "keyword"},
            format="json",
        ).content.decode()
        for text in (listing, found):
            assert "globex-secret" not in text
            assert f"acme-{slug}" in listing
    forgotten = client.post("/api/v1/domains/support/forget", {"key": "shared-key"}, format="json")
    assert forgotten.json()["deleted"] == 1  # only acme/support's record with that key
    assert MemoryRecord.unscoped.filter(content__startswith="globex-secret").count() == 2


def test_a_shared_slug_means_the_callers_own_domain(world):
    domains, records, keys = world
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {keys['acme-unbound']}")
    listing = client.get("/api/v1/domains/support/records").json()["results"]
    assert [r["content"] for r in listing] == ["acme-support"]


@pytest.mark.parametrize("key_name", ["acme-unbound", "acme-support"])
@pytest.mark.parametrize(("domain", "status"), [("support", 200), ("sales", None), ("legal", 404)])
def test_the_key_and_the_urls_domain_are_read_in_one_query(world, key_name, domain, status):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    _, _, keys = world
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {keys[key_name]}")
    with CaptureQueriesContext(connection) as queries:
        response = client.get(f"/api/v1/domains/{domain}/sources")
    # sales: acme's, but outside the support-bound key; legal: globex's only.
    expected = status or (200 if key_name == "acme-unbound" else 404)
    assert response.status_code == expected
    statements = [q["sql"] for q in queries.captured_queries]
    assert 'FROM "tenants_apikey"' in statements[0] and '"tenants_domain"' in statements[0]
    assert not any(s.startswith('SELECT "tenants_domain"') for s in statements), statements


def test_scope_refusals_are_observed_for_the_callers_org(world):
    from memoryhub.models import Observation

    domains, records, keys = world
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {keys['acme-unbound']}")
    client.get("/api/v1/domains/legal/sources")
    [refused] = Observation.unscoped.filter(kind="scope.refused")
    assert refused.org.slug == "acme"
    assert refused.domain is None


def test_another_orgs_key_cannot_read_or_forget_the_first_orgs_keys(world):
    """What the HTTP memory store sends (list by namespace and key, forget a key or a
    namespace), with acme's key against globex's records: nothing read, nothing gone."""
    _, records, keys = world
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {keys['acme-unbound']}")
    before = snapshot()
    for domain in ("support", "legal"):
        base = f"/api/v1/domains/{domain}"
        listed = client.get(
            f"{base}/records",
            {
                "namespace": "user:alice",
                "key": "shared-key",
                "source": "handbook",
                "ordering": "updated",
                "key_prefix": "",
            },
        )
        assert listed.status_code in (200, 404), listed.status_code
        assert "globex-secret" not in listed.content.decode()
        if listed.status_code == 200:
            assert listed.json()["results"] == []  # acme/support's handbook has no such key
        for body in (
            {"namespace": "user:alice", "key": "shared-key", "source": "handbook"},
            {"namespace": "user:alice", "source": "handbook"},
        ):
            forgotten = client.post(f"{base}/forget", body, format="json")
            assert forgotten.status_code in (200, 404), forgotten.status_code
            if forgotten.status_code == 200:
                assert forgotten.json()["deleted"] == 0
    assert snapshot() == before
    assert MemoryRecord.unscoped.filter(content__startswith="globex-secret").count() == 2
