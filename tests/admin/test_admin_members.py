"""An org's owner chooses a membership's user among the users of the orgs they
administer: another org's user is neither named (by the form, its raw-id widget or its
error re-render, whatever id and role are posted) nor made a member."""

from __future__ import annotations

import pytest
from django.test import Client

from tenants.models import Membership
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db

ADD = "/admin/tenants/membership/add/"


@pytest.fixture
def owner(tenant, other_tenant):
    user = MembershipFactory(org=tenant.org, role="owner", user__is_staff=True).user
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("role", ["viewer", "not-a-role"])
def test_another_orgs_user_is_never_named_nor_added(owner, tenant, other_tenant, role):
    stranger = MembershipFactory(
        org=other_tenant.org, role="owner", user__username="globex_secret_owner"
    ).user

    response = owner.post(ADD, {"user": stranger.pk, "org": tenant.org.pk, "role": role})

    assert response.status_code == 200  # the form again, with its errors
    page = response.content.decode()
    assert "globex_secret_owner" not in page
    assert f"/admin/auth/user/{stranger.pk}/change/" not in page
    assert not Membership.objects.filter(user=stranger, org=tenant.org).exists()


def test_a_user_of_the_owners_org_is_named_and_may_be_given_a_role(owner, tenant):
    colleague = MembershipFactory(org=tenant.org, role="viewer", user__username="acme_colleague")
    response = owner.post(ADD, {"user": colleague.user.pk, "org": tenant.org.pk, "role": "viewer"})
    assert response.status_code == 200  # already a member: the unique rule says so
    assert "acme_colleague" in response.content.decode()


def test_the_orgs_page_inline_does_not_name_strangers_either(owner, tenant, other_tenant):
    stranger = MembershipFactory(org=other_tenant.org, user__username="globex_inline_user").user
    page = owner.get(f"/admin/tenants/org/{tenant.org.pk}/change/")
    assert page.status_code == 200
    prefix = "memberships"
    response = owner.post(
        f"/admin/tenants/org/{tenant.org.pk}/change/",
        {
            "slug": tenant.org.slug,
            "name": tenant.org.name,
            f"{prefix}-TOTAL_FORMS": "1",
            f"{prefix}-INITIAL_FORMS": "0",
            f"{prefix}-0-user": str(stranger.pk),
            f"{prefix}-0-role": "bogus",
            "domains-TOTAL_FORMS": "0",
            "domains-INITIAL_FORMS": "0",
        },
    )
    assert "globex_inline_user" not in response.content.decode()
    assert not Membership.objects.filter(user=stranger, org=tenant.org).exists()


def test_a_newcomer_of_no_org_may_be_added(owner, tenant):
    from tests.factories import UserFactory

    newcomer = UserFactory(username="newcomer_without_org")
    response = owner.post(ADD, {"user": newcomer.pk, "org": tenant.org.pk, "role": "viewer"})
    assert response.status_code == 302
    assert Membership.objects.filter(user=newcomer, org=tenant.org).exists()
