"""API keys: hashed at rest, printed once by create_api_key, and honoured by whoami."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from tenants.models import ApiKey
from tests.factories import DomainFactory, OrgFactory, create_api_key

WHOAMI = "/api/v1/whoami"


def auth(key: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Api-Key {key}"}


@pytest.mark.django_db
def test_key_is_stored_hashed():
    api_key, key = create_api_key()
    secret = key.split(".", 1)[1]
    assert api_key.hashed_key and secret not in api_key.hashed_key
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM tenants_apikey")
        rows = cursor.fetchall()
    assert rows and all(secret not in str(value) for row in rows for value in row)
    assert ApiKey.objects.is_valid(key)


@pytest.mark.django_db
def test_create_api_key_output_is_a_working_credential(client):
    org = OrgFactory(slug="acme")
    DomainFactory(org=org, slug="support")
    out = StringIO()
    call_command(
        "create_api_key", "acme", "--domain", "support", "--name", "bot", "--write", stdout=out
    )
    key = out.getvalue().strip().splitlines()[-1]
    response = client.get(WHOAMI, **auth(key))
    assert response.status_code == 200
    assert response.json() == {
        "org": "acme",
        "domain": "support",
        "permissions": ["write"],
        "key": {"name": "bot", "prefix": key.split(".")[0], "expires_at": None},
    }


@pytest.mark.django_db
def test_create_api_key_defaults_to_read_only(client):
    OrgFactory(slug="acme")
    out = StringIO()
    call_command("create_api_key", "acme", "--name", "reader", stdout=out)
    key = out.getvalue().strip().splitlines()[-1]
    body = client.get(WHOAMI, **auth(key)).json()
    assert body["permissions"] == ["read"]
    assert body["domain"] is None


@pytest.mark.django_db
def test_create_api_key_refuses_a_domain_of_another_org():
    from django.core.management.base import CommandError

    OrgFactory(slug="acme")
    DomainFactory(org=OrgFactory(slug="globex"), slug="secret")
    with pytest.raises(CommandError, match="Unknown domain"):
        call_command("create_api_key", "acme", "--domain", "secret", "--name", "x")
    assert not ApiKey.objects.exists()


@pytest.mark.django_db
def test_revoked_key_gets_401(client):
    api_key, key = create_api_key()
    assert client.get(WHOAMI, **auth(key)).status_code == 200
    api_key.revoked = True
    api_key.save()
    response = client.get(WHOAMI, **auth(key))
    assert response.status_code == 401
    assert response.json()["code"] == "invalid_key"


@pytest.mark.django_db
def test_expired_key_gets_401(client):
    _, key = create_api_key(expiry_date=timezone.now() - timedelta(seconds=1))
    response = client.get(WHOAMI, **auth(key))
    assert response.status_code == 401
    assert response.json()["code"] == "expired_key"
    assert response["WWW-Authenticate"].startswith("Api-Key")


@pytest.mark.django_db
def test_key_of_inactive_org_gets_401(client):
    api_key, key = create_api_key()
    api_key.org.is_active = False
    api_key.org.save()
    assert client.get(WHOAMI, **auth(key)).status_code == 401


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header",
    ["Api-Key", "Api-Key not-a-key", "Api-Key a.b c", "Api-Key xxxxxxxx.yyyyyyyy"],
)
def test_malformed_or_unknown_keys_get_401(client, header):
    response = client.get(WHOAMI, HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert set(response.json()) == {"code", "detail"}


@pytest.mark.django_db
def test_no_credentials_get_401(client):
    response = client.get(WHOAMI)
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


@pytest.mark.django_db
def test_key_of_one_org_never_describes_another(client):
    _, acme_key = create_api_key(org=OrgFactory(slug="acme"))
    _, globex_key = create_api_key(org=OrgFactory(slug="globex"))
    assert client.get(WHOAMI, **auth(acme_key)).json()["org"] == "acme"
    assert client.get(WHOAMI, **auth(globex_key)).json()["org"] == "globex"


@pytest.mark.django_db
def test_last_used_is_recorded(client):
    api_key, key = create_api_key()
    assert api_key.last_used_at is None
    client.get(WHOAMI, **auth(key))
    api_key.refresh_from_db()
    assert api_key.last_used_at is not None


@pytest.mark.django_db
def test_get_from_key_loads_the_key_its_org_and_domains_in_one_query(django_assert_num_queries):
    org, other = OrgFactory(slug="acme"), OrgFactory(slug="globex")
    support = DomainFactory(org=org, slug="support")
    DomainFactory(org=org, slug="sales")
    DomainFactory(org=other, slug="legal")
    bound, bound_key = create_api_key(org=org, domain=support)
    unbound, unbound_key = create_api_key(org=org)
    with django_assert_num_queries(1):
        found = ApiKey.objects.get_from_key(bound_key, domain_slug="sales")
        assert (found.pk, found.org.slug, found.domain.slug) == (bound.pk, "acme", "support")
        assert found.url_domain[0] == "sales" and found.url_domain[1] is not None
    with django_assert_num_queries(1):
        found = ApiKey.objects.get_from_key(unbound_key, domain_slug="legal")
        assert found.domain is None and found.org.slug == "acme"
        assert found.url_domain == ("legal", None)  # globex's domain is not acme's
    found = ApiKey.objects.get_from_key(unbound_key)
    assert found.url_domain is None
    found.name = "renamed"
    found.save()  # a normal model instance
    assert ApiKey.objects.get(pk=unbound.pk).name == "renamed"
    with pytest.raises(ApiKey.DoesNotExist):
        ApiKey.objects.get_from_key(unbound_key[:-1] + ("x" if unbound_key[-1] != "x" else "y"))
    ApiKey.objects.filter(pk=unbound.pk).update(revoked=True)
    with pytest.raises(ApiKey.DoesNotExist):
        ApiKey.objects.get_from_key(unbound_key)
