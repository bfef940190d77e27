"""The tenants admin in the project without memoryhub: ``python -m
tests.tenants_only.smoke`` on a migrated database prints ``tenants admin OK``."""

import os
import sys

import django


def admin_smoke() -> None:
    """The tenants admin on a migrated database: a superuser sees and changes every
    page; a staff owner of an org is refused (the default access: superusers only);
    memoryhub never loaded. Prints ``tenants admin OK``; any failure raises."""
    from django.contrib.auth.models import User
    from django.test import Client
    from django.test.utils import setup_test_environment

    from tenants.models import ApiKey, Domain, Membership, Org

    setup_test_environment()
    org = Org.objects.create(slug="acme", name="Acme")
    domain = Domain.objects.create(org=org, slug="support")
    ApiKey.objects.create_key(name="bot", org=org, domain=domain)
    root = User.objects.create_superuser("root", "root@example.com", "pw")
    owner = User.objects.create_user("owner", password="pw", is_staff=True)
    Membership.objects.create(user=owner, org=org, role=Membership.Role.OWNER)

    client = Client()
    client.force_login(root)
    pages = [
        "/admin/",
        "/admin/tenants/org/",
        f"/admin/tenants/org/{org.pk}/change/",
        "/admin/tenants/domain/",
        f"/admin/tenants/domain/{domain.pk}/delete/",
        "/admin/tenants/membership/",
        "/admin/tenants/apikey/",
        "/admin/tenants/apikey/add/",
    ]
    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, (page, response.status_code)
    response = client.post(f"/admin/tenants/domain/{domain.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302 and not Domain.objects.exists(), response.status_code

    client.force_login(owner)
    assert client.get("/admin/tenants/org/").status_code == 403
    assert client.get(f"/admin/tenants/org/{org.pk}/change/").status_code == 403

    loaded = sorted(name for name in sys.modules if name.split(".")[0] == "memoryhub")
    assert loaded == [], loaded
    print("tenants admin OK")


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.tenants_only.settings")
    django.setup()
    admin_smoke()
