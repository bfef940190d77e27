"""The forget service asks the policy itself: a door that forgot to ask (a host's own
view, a task, a future tool) cannot erase for a principal without the permission."""

from __future__ import annotations

import pytest

from memoryhub import policy
from memoryhub.exceptions import PolicyDenied
from memoryhub.models import MemoryRecord
from memoryhub.services import forget, write
from memoryhub.services.forget import ForgetRequest
from tests.factories import MembershipFactory, create_api_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(tenant, other_tenant):
    write.write(tenant.scope, [{"content": "alice likes tea", "namespace": "user:alice"}])
    write.write(other_tenant.scope, [{"content": "globex alice", "namespace": "user:alice"}])
    return MemoryRecord.unscoped.count()


@pytest.mark.parametrize(
    "request_",
    [ForgetRequest(namespace="user:alice"), ForgetRequest(all=True), ForgetRequest(key="k")],
    ids=["subject", "domain", "key"],
)
def test_a_principal_without_forget_erases_nothing(tenant, other_tenant, alice, request_):
    reader, _ = create_api_key(org=tenant.org, can_read=True, can_write=True)
    viewer = MembershipFactory(org=tenant.org, role="viewer").user
    globex_key, _ = create_api_key(org=other_tenant.org, can_forget=True)
    for principal in (
        policy.principal_for_key(reader),
        policy.principal_for_user(viewer),
        policy.principal_for_key(globex_key),  # another org's key
    ):
        with pytest.raises(PolicyDenied):
            forget.forget(tenant.scope, request_, principal=principal)
    assert MemoryRecord.unscoped.count() == alice


def test_a_principal_with_forget_erases_its_own_org_only(tenant, other_tenant, alice):
    key, _ = create_api_key(org=tenant.org, can_forget=True)
    result = forget.forget(
        tenant.scope, ForgetRequest(namespace="user:alice"), principal=policy.principal_for_key(key)
    )
    assert result.deleted == 1
    assert list(MemoryRecord.unscoped.values_list("content", flat=True)) == ["globex alice"]
