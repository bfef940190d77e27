"""Ending a record's life early is a forget, whatever the door calls it: a write-only key
cannot set or shorten the expiry of a record that exists (by id or by key), while it may
give an expiry to what it creates; a key that may forget can, and is answered with the
state it saved, never a 404 for a stored change. Another org sees nothing change."""

from __future__ import annotations

import pytest

from memoryhub import policy
from memoryhub.exceptions import PolicyDenied
from memoryhub.models import MemoryRecord
from memoryhub.services import updates, write
from tests.factories import key_client

pytestmark = pytest.mark.django_db

RECORDS = "/api/v1/domains/support/records"


@pytest.fixture
def alices(tenant, other_tenant):
    write.write(other_tenant.scope, [{"content": "Globex keeps this", "key": "plan"}])
    [record_id] = write.write(
        tenant.scope, [{"content": "Alice's plan", "key": "plan", "namespace": "user:alice"}]
    ).record_ids
    return record_id


def expiry(record_id: str):
    return MemoryRecord.unscoped.values_list("expires_at", flat=True).get(pk=record_id)


def untouched(other_tenant) -> None:
    rows = list(
        MemoryRecord.unscoped.filter(org_id=other_tenant.org.pk).values_list(
            "content", "expires_at"
        )
    )
    assert rows == [("Globex keeps this", None)]


@pytest.mark.parametrize(
    "change",
    [
        {"ttl_seconds": 1},
        {"expires_at": "2020-01-01T00:00:00Z"},
        {"expires_at": "2999-01-01T00:00:00Z"},
    ],
    ids=["ttl", "past", "far-future-where-there-was-none"],
)
def test_a_write_only_key_cannot_expire_an_existing_record_by_id(
    tenant, other_tenant, alices, change
):
    api = key_client(tenant, can_write=True)

    response = api.patch(f"{RECORDS}/{alices}", change, format="json")

    assert response.status_code == 403, response.content
    assert response.json()["code"] == "permission_denied"
    assert expiry(alices) is None
    untouched(other_tenant)


def test_a_write_only_key_cannot_expire_an_existing_record_by_key(tenant, other_tenant, alices):
    api = key_client(tenant, can_write=True)
    item = {"content": "Alice's plan", "key": "plan", "namespace": "user:alice", "ttl_seconds": 1}

    response = api.post(RECORDS, {"items": [item, {"content": "a new note"}]}, format="json")

    assert response.status_code == 403, response.content
    assert expiry(alices) is None
    assert not MemoryRecord.unscoped.filter(content="a new note").exists()  # nothing written
    untouched(other_tenant)


def test_a_write_may_give_an_expiry_to_what_it_creates_and_lengthen_one(tenant, alices):
    api = key_client(tenant, can_write=True)
    created = api.post(RECORDS, {"items": [{"content": "brief", "ttl_seconds": 60}]}, format="json")
    assert created.status_code == 202
    [record] = created.json()["records"]
    assert expiry(record["id"]) is not None

    lengthened = api.patch(f"{RECORDS}/{record['id']}", {"ttl_seconds": 3600}, format="json")
    assert lengthened.status_code == 200, lengthened.content
    kept = api.patch(f"{RECORDS}/{alices}", {"content": "Alice's new plan"}, format="json")
    assert kept.status_code == 200 and expiry(alices) is None


def test_a_key_that_may_forget_expires_a_record_and_hears_what_was_saved(
    tenant, other_tenant, alices
):
    api = key_client(tenant, can_read=True, can_write=True, can_forget=True)

    response = api.patch(
        f"{RECORDS}/{alices}", {"expires_at": "2020-01-01T00:00:00Z"}, format="json"
    )

    assert response.status_code == 200, response.content  # stored: never a 404
    assert response.json()["expires_at"].startswith("2020-01-01")
    assert expiry(alices).year == 2020
    assert api.get(f"{RECORDS}/{alices}").status_code == 404  # expired: gone from reads
    untouched(other_tenant)


def test_the_python_api_asks_the_same_rule(tenant, alices):
    writer = policy.KeyPrincipal(
        org_id=tenant.org.pk, domain_id=None, permissions=frozenset({"write"})
    )

    with pytest.raises(PolicyDenied):
        updates.update_record(
            tenant.scope, alices, {"ttl_seconds": 5}, partial=True, principal=writer
        )
    with pytest.raises(PolicyDenied):
        write.write(
            tenant.scope,
            [{"content": "x", "key": "plan", "namespace": "user:alice", "ttl_seconds": 5}],
            principal=writer,
        )
    assert expiry(alices) is None
    assert policy.ends_life_early(None, expiry(alices)) is False
