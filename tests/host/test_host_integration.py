"""What a host project hooks into: signals after commit, its users' namespaces, and its
own tenant ids."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from memoryhub import policy, signals
from memoryhub.namespaces import for_user
from memoryhub.services import updates, write
from memoryhub.services.forget import ForgetRequest, forget
from tenants.models import Org

pytestmark = pytest.mark.django_db


@pytest.fixture
def received():
    got: list[tuple[str, dict]] = []

    def receiver(name: str):
        return lambda sender, **payload: got.append((name, payload))

    handlers = {
        name: receiver(name) for name in ("record_written", "records_forgotten", "subject_erased")
    }
    for name, handler in handlers.items():
        getattr(signals, name).connect(handler, weak=False)
    yield got
    for name, handler in handlers.items():
        getattr(signals, name).disconnect(handler)


def test_signals_are_sent_after_commit_with_their_payloads(tenant, received, committed):
    result = committed(
        write.write, tenant.scope, [{"content": "Alice likes tea.", "namespace": "user:alice"}]
    )
    [(name, payload)] = received
    assert name == "record_written"
    assert payload["scope"] == tenant.scope and payload["source"] == "memory"
    assert payload["created"] == result.record_ids and payload["updated"] == []
    received.clear()
    erased = committed(
        forget,
        tenant.scope,
        ForgetRequest(namespace="user:alice"),
        principal=policy.AgentPrincipal(label="t"),
    )
    names = [name for name, _ in received]
    assert names == ["records_forgotten", "subject_erased"]
    forgotten, subject = received[0][1], received[1][1]
    assert forgotten["receipt"] == erased.receipt and forgotten["deleted"] == 1
    assert forgotten["selector"]["namespace"] != "user:alice"  # hashed, as the receipt
    assert subject["namespace"] == "user:alice" and subject["actor"] == "t"


def test_an_update_by_id_is_announced_too(tenant, received, committed):
    [record_id] = committed(write.write, tenant.scope, [{"content": "Alice likes tea."}]).record_ids
    received.clear()
    committed(updates.update_record, tenant.scope, record_id, {"content": "Alice likes coffee."},
              partial=True, principal=policy.AgentPrincipal(label="api-key:abc"))  # fmt: skip
    [(name, payload)] = received
    assert name == "record_written"
    assert payload["created"] == [] and payload["updated"] == [record_id]
    assert payload["source"] == "memory" and payload["actor"] == "api-key:abc"
    received.clear()
    committed(updates.update_record, tenant.scope, record_id, {"content": "Alice likes coffee."},
              partial=True)  # fmt: skip
    assert received == []  # nothing changed: nothing to announce


def test_a_rolled_back_write_sends_nothing(tenant, received, django_capture_on_commit_callbacks):
    from django.db import transaction

    with django_capture_on_commit_callbacks(execute=True):
        try:
            with transaction.atomic():
                write.write(tenant.scope, [{"content": "never"}])
                raise RuntimeError("the host's transaction fails")
        except RuntimeError:
            pass
    assert received == []


def test_a_receivers_failure_does_not_fail_the_write(tenant, committed):
    def broken(sender, **payload):
        raise ValueError("the host's receiver is broken")

    signals.record_written.connect(broken, weak=False)
    try:
        result = committed(write.write, tenant.scope, [{"content": "kept"}])
    finally:
        signals.record_written.disconnect(broken)
    assert result.accepted == ["memory"]


def test_a_users_namespace_follows_the_setting(settings):
    user = get_user_model().objects.create_user("alice")
    assert for_user(user) == f"user:{user.pk}"
    settings.MEMORYHUB = {"USER_NAMESPACE": "person:{username}"}
    assert for_user(user) == "person:alice"


def test_the_hosts_tenant_id_maps_to_one_org():
    org, created = Org.objects.get_or_create_for("crm-42", name="Acme Corp")
    assert created and (org.slug, org.name, org.external_ref) == (
        "acme-corp",
        "Acme Corp",
        "crm-42",
    )
    again, created = Org.objects.get_or_create_for("crm-42", name="Renamed")
    assert again == org and not created
    other, _ = Org.objects.get_or_create_for("crm-43", name="Acme Corp")
    assert other.slug == "acme-corp-2"
    with pytest.raises(ValueError, match="external_ref"):
        Org.objects.get_or_create_for("")


def test_a_delete_by_id_is_announced_as_records_forgotten(tenant, received, committed):
    from memoryhub.services.forget import forget_record

    [record_id] = committed(write.write, tenant.scope, [{"content": "Alice likes tea."}]).record_ids
    received.clear()
    erased = committed(forget_record, tenant.scope, record_id, principal=policy.SYSTEM)
    [(name, payload)] = received
    assert name == "records_forgotten"
    assert payload["receipt"] == erased.receipt and payload["deleted"] == 1
    assert payload["selector"] == {"id": record_id, "sources": ["memory"]}
