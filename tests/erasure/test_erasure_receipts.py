"""Erasure receipts are permanent and verifiable, and name no one."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from memoryhub.models import ErasureReceipt, Observation
from memoryhub.services import knowledge_bases, maintenance, write
from memoryhub.services.forget import ForgetRequest, forget, salted_hash
from tests.factories import MembershipFactory, key_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def erased(tenant):
    write.write(
        tenant.scope,
        [{"content": "Carol's IBAN DE89.", "namespace": "user:carol"}, {"content": "Shared."}],
    )
    client = key_client(tenant, can_forget=True)
    response = client.post(
        f"/api/v1/domains/{tenant.domain.slug}/forget", {"namespace": "user:carol"}, format="json"
    )
    assert response.status_code == 200
    return response.json()["receipt"]


def test_the_forget_response_names_a_receipt_a_forget_key_can_read(tenant, erased):
    client = key_client(tenant, can_forget=True)
    response = client.get(f"/api/v1/domains/{tenant.domain.slug}/erasures/{erased}")
    assert response.status_code == 200
    body = response.json()
    assert body["id"] == erased
    assert body["by_source"] == {"memory": 1}
    assert body["deleted"] == 1
    assert body["org"] == "acme" and body["domain"] == tenant.domain.slug
    assert body["selector"]["namespace"] == salted_hash("user:carol")
    assert "carol" not in json.dumps(body).lower()


def test_only_forget_keys_of_the_org_read_receipts(tenant, other_tenant, erased):
    reader = key_client(tenant, can_read=True)
    url = f"/api/v1/domains/{tenant.domain.slug}/erasures/{erased}"
    assert reader.get(url).status_code == 403
    theirs = key_client(other_tenant, can_forget=True)
    # globex's own "support" domain does not have acme's receipt.
    response = theirs.get(f"/api/v1/domains/{other_tenant.domain.slug}/erasures/{erased}")
    assert response.status_code == 404
    assert response.json()["code"] == "receipt_not_found"
    mine = key_client(tenant, can_forget=True)
    assert mine.get(f"/api/v1/domains/{tenant.domain.slug}/erasures/nonsense").status_code == 404


def test_receipts_outlive_retention_and_the_org(tenant, erased, settings):
    settings.MEMORYHUB = {"OBSERVATION_RETENTION_DAYS": 1}
    Observation.unscoped.update(created_at=timezone.now() - timedelta(days=30))
    ErasureReceipt.unscoped.update(created_at=timezone.now() - timedelta(days=3650))
    maintenance.purge_expired()
    assert not Observation.unscoped.filter(kind="memory.forgotten").exists()
    assert ErasureReceipt.unscoped.filter(pk=erased).exists()
    tenant.org.delete()
    receipt = ErasureReceipt.unscoped.get(pk=erased)
    assert receipt.org_slug == "acme"


def test_an_erasure_that_only_cancels_an_import_has_a_receipt(tenant):
    from memoryhub.services import imports

    kb = knowledge_bases.ensure_knowledge_base(tenant.scope, "memory")
    imports.create_job(
        tenant.scope,
        kb,
        text=json.dumps({"content": "Carol"}),
        format="jsonl",
        filename="carol.jsonl",
        namespace="user:carol",
    )
    result = forget(tenant.scope, ForgetRequest(namespace="user:carol"))
    assert result.deleted == 0 and result.cancelled_imports == 1
    assert ErasureReceipt.unscoped.get(pk=result.receipt).cancelled_imports == 1


def test_the_receipt_key_is_its_own(tenant, settings):
    write.write(tenant.scope, [{"content": "x", "namespace": "user:dora"}])
    settings.MEMORYHUB = {"ERASURE_RECEIPT_KEY": "k" * 40}
    result = forget(tenant.scope, ForgetRequest(namespace="user:dora"))
    settings.SECRET_KEY = "rotated-" + "z" * 50
    receipt = ErasureReceipt.unscoped.get(pk=result.receipt)
    assert receipt.selector["namespace"] == salted_hash("user:dora")  # still verifiable


def test_the_admin_lists_looks_up_and_downloads_receipts(tenant, other_tenant, erased):
    write.write(other_tenant.scope, [{"content": "globex carol", "namespace": "user:carol"}])
    forget(other_tenant.scope, ForgetRequest(namespace="user:carol"))
    outsider = Client()
    outsider.force_login(MembershipFactory(org=tenant.org, role="viewer").user)
    assert outsider.get("/admin/memoryhub/erasurereceipt/").status_code == 403  # read only
    viewer = Client()  # an operator: who may erase may see receipts
    viewer.force_login(MembershipFactory(org=tenant.org, role="operator").user)
    listing = viewer.get("/admin/memoryhub/erasurereceipt/")
    assert listing.status_code == 200
    assert tenant.domain.slug in listing.text and "globex" not in listing.text
    found = viewer.post("/admin/memoryhub/erasurereceipt/lookup/", {"namespace": "user:carol"})
    assert 'id="lookup-found"' in found.text and "Erased: 1 receipt." in found.text
    assert "globex" not in found.text
    none = viewer.post("/admin/memoryhub/erasurereceipt/lookup/", {"namespace": "user:zed"})
    assert 'id="lookup-none"' in none.text
    download = viewer.get(f"/admin/memoryhub/erasurereceipt/{erased}/download/")
    assert download.status_code == 200
    assert json.loads(download.content)["id"] == erased
    assert "carol" not in download.content.decode().lower()
    theirs = ErasureReceipt.unscoped.get(org_slug="globex")
    assert viewer.get(f"/admin/memoryhub/erasurereceipt/{theirs.pk}/download/").status_code == 404
    batch = viewer.get(f"/admin/memoryhub/erasurereceipt/batch/{theirs.batch}/")
    assert batch.status_code == 404
    assert viewer.post(f"/admin/memoryhub/erasurereceipt/{erased}/delete/").status_code == 403


def test_an_owner_who_deletes_their_org_still_sees_the_receipt(tenant):
    write.write(tenant.scope, [{"content": "last words"}])
    owner = Client()
    owner.force_login(MembershipFactory(org=tenant.org, role="owner").user)
    response = owner.post(
        f"/admin/tenants/org/{tenant.org.pk}/delete/", {"post": "yes"}, follow=True
    )
    assert response.status_code == 200
    assert "Erased 1 record." in response.text
    assert "acme/" in response.text and "no longer exists" in response.text
