"""Smoke test run inside the host project: migrate, write, read, API, admin.

Run as ``python -m tests.host_project.smoke`` with ``HOST_PROJECT_DATABASE_URL`` set.
Prints ``host project OK`` on success; any failure raises.
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.host_project.settings")
django.setup()

from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

from memoryhub.models import MemoryRecord  # noqa: E402
from memoryhub.scope import Scope, tenant_scope  # noqa: E402
from memoryhub.services import write  # noqa: E402
from tenants.models import ApiKey, Domain, Membership, Org  # noqa: E402
from tests.host_project.accounts.models import Account  # noqa: E402
from tests.host_project.celery import app  # noqa: E402,F401


def main() -> None:
    setup_test_environment()
    call_command("check", fail_level="ERROR")
    call_command("migrate", interactive=False, verbosity=0)
    org = Org.objects.create(slug="host-org", name="Host org", external_ref="crm-42")
    domain = Domain.objects.create(org=org, slug="support")
    scope = Scope.for_domain(domain)
    result = write.write(scope, [{"content": "The monolith remembers this.", "namespace": "u:1"}])
    assert result.accepted == ["memory"], result
    with tenant_scope(scope):
        record = MemoryRecord.objects.get()
    assert record.status == "indexed", record.status
    assert len(record.embedding) == 128  # the host's MEMORYHUB settings apply

    _, key = ApiKey.objects.create_key(name="host", org=org, can_read=True, can_write=True)
    client = Client()
    response = client.get("/memory/api/v1/whoami", HTTP_AUTHORIZATION=f"Api-Key {key}")
    assert response.status_code == 200, response.content
    assert response.json()["org"] == "host-org"
    assert client.get("/").content == b"the monolith's own home page"
    _contract_holds_under_the_hosts_drf_settings(client, key)

    user = Account.objects.create_user("operator", password="pw", is_staff=True)
    Membership.objects.create(user=user, org=org)
    client.force_login(Account.objects.create_superuser("root", password="pw"))
    page = client.get("/backoffice/memoryhub/memoryrecord/")
    assert page.status_code == 200, page.status_code
    assert b"The monolith remembers this." in page.content
    print("host project OK")


def _contract_holds_under_the_hosts_drf_settings(client: Client, key: str) -> None:
    """The host's REST_FRAMEWORK (session-only auth, IsAdminUser, its own exception
    handler, page-number pagination, a 1/day anonymous throttle) never reaches memoryhub."""
    api = "/memory/api/v1"
    auth = {"HTTP_AUTHORIZATION": f"Api-Key {key}"}
    for _ in range(3):  # the host's 1/day anonymous throttle does not apply
        anonymous = client.get(f"{api}/whoami")
        assert anonymous.status_code == 401, anonymous.content
        assert anonymous.json()["code"] == "not_authenticated", anonymous.content
        assert anonymous["WWW-Authenticate"].startswith("Api-Key"), anonymous.headers
    written = client.post(
        f"{api}/domains/support/records",
        {"items": [{"content": f"fact {n}"} for n in range(3)]},
        content_type="application/json",
        **auth,
    )
    assert written.status_code in (200, 202), written.content
    listed = client.get(f"{api}/domains/support/records", **auth)
    assert listed.status_code == 200, listed.content
    assert {"next", "previous", "results"} <= set(listed.json()), listed.json()
    assert len(listed.json()["results"]) == 4  # the cursor's page size, not the host's 2
    queried = client.post(
        f"{api}/domains/support/query",
        {"query": "fact", "where": {"price": {"$gte": []}}},
        content_type="application/json",
        **auth,
    )
    assert queried.status_code == 400, queried.content
    assert queried["Content-Type"] == "application/json"
    assert queried.json()["code"] == "invalid" and "where" in str(queried.json()["errors"])
    missing = client.get(f"{api}/domains/nowhere/records", **auth)
    assert missing.status_code == 404, missing.content
    assert missing.json()["code"] == "domain_not_found", missing.content
    health = client.get(f"{api}/health")
    assert health.status_code == 200 and health.json()["status"] == "ok", health.content


if __name__ == "__main__":
    main()
