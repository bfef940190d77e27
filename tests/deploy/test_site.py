"""The runnable site: health, schema, docs, system checks and the management commands."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import CommandError

from memoryhub.models import KnowledgeBase, MemoryRecord
from tenants.models import ApiKey, Domain, Org


@pytest.mark.django_db
def test_health_reports_database_broker_and_embedder(client):
    response = client.get("/api/v1/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["database"]["ok"] is True
    assert body["database"]["pgvector"]
    assert body["broker"] == {"ok": True, "mode": "eager"}
    assert body["embedder"]["dimensions"] == 384


@pytest.mark.django_db
def test_openapi_schema_and_offline_swagger_ui(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    document = schema.json()
    assert document["openapi"].startswith("3.")
    assert "/api/v1/health" in document["paths"]
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    page = docs.content.decode()
    assert "/static/drf_spectacular_sidecar/" in page
    assert "cdn." not in page


def _check_ids(settings_value, settings):
    settings.MEMORYHUB = settings_value
    return {message.id for message in run_checks(tags=["memoryhub"])}


def test_default_settings_pass_checks(settings):
    assert _check_ids({}, settings) == set()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"EMBEDDER": "no.such.Embedder"}, "memoryhub.E003"),
        (
            {
                "EMBEDDER": "memoryhub.embedders.HashingEmbedder",
                "EMBEDDER_OPTIONS": {"dimensions": 0},
            },
            "memoryhub.E004",
        ),
        ({"EMBEDDER": "memoryhub.models.MemoryRecord"}, "memoryhub.E021"),
        ({"MAX_K": 0}, "memoryhub.E002"),
        ({"MAX_WRITE_ITEMS": "100"}, "memoryhub.E002"),
        ({"DEFAULT_K": 50, "MAX_K": 10}, "memoryhub.E019"),
        ({"MAX_KAY": 10}, "memoryhub.W001"),
    ],
)
def test_misconfiguration_is_a_system_check(settings, value, expected):
    assert expected in _check_ids(value, settings)


def test_settings_are_reloaded_when_changed(settings):
    from memoryhub.conf import memoryhub_settings

    first = memoryhub_settings.embedder()
    settings.MEMORYHUB = {"EMBEDDER_OPTIONS": {"dimensions": 64}}
    assert memoryhub_settings.embedder() is not first
    assert memoryhub_settings.embedder().dimensions == 64


@pytest.mark.django_db
def test_create_org_and_domain_commands():
    call_command("create_org", "acme", "--name", "Acme", stdout=StringIO())
    call_command("create_domain", "acme", "support", stdout=StringIO())
    assert Domain.objects.get(org__slug="acme", slug="support").org.name == "Acme"
    with pytest.raises(CommandError, match="already exists"):
        call_command("create_org", "acme", stdout=StringIO())
    with pytest.raises(CommandError, match="Unknown org"):
        call_command("create_domain", "nope", "support", stdout=StringIO())
    with pytest.raises(CommandError, match="Invalid"):
        call_command("create_org", "not a slug", stdout=StringIO())


@pytest.mark.django_db(transaction=True)
def test_seed_demo_is_safe_to_rerun():
    first = StringIO()
    call_command("seed_demo", stdout=first)
    assert "http://127.0.0.1:8000/admin/  admin / " in first.getvalue()
    assert "API key" in first.getvalue()
    counts = (
        Org.objects.count(),
        Domain.objects.count(),
        KnowledgeBase.unscoped.count(),
        MemoryRecord.unscoped.count(),
        ApiKey.objects.count(),
    )
    second = StringIO()
    call_command("seed_demo", "--base-url", "http://127.0.0.1:8765/", stdout=second)
    assert "password unchanged" in second.getvalue()
    assert "API docs: http://127.0.0.1:8765/api/docs/" in second.getvalue()
    assert counts == (
        Org.objects.count(),
        Domain.objects.count(),
        KnowledgeBase.unscoped.count(),
        MemoryRecord.unscoped.count(),
        ApiKey.objects.count(),
    )
    handbook = KnowledgeBase.unscoped.get(name="handbook")
    assert handbook.read_only
    records = MemoryRecord.unscoped.filter(knowledge_base=handbook)
    assert records.count() == 4
    assert set(records.values_list("status", flat=True)) == {"indexed"}


@pytest.mark.django_db
def test_admin_index_lists_every_model(admin_client):
    page = admin_client.get("/admin/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<title>Site administration | memoryhub</title>" in html
    for label in (
        "Orgs",
        "Domains",
        "Memberships",
        "API keys",
        "Knowledge bases",
        "Memory records",
        "Observations",
    ):
        assert f">{label}</a>" in html, label


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("/admin/tenants/org/", ">acme</a>"),
        ("/admin/tenants/domain/", ">support</a>"),
        ("/admin/tenants/membership/", ">site-operator</a>"),
        ("/admin/tenants/apikey/", "site bot"),
        ("/admin/tenants/apikey/add/", 'name="can_write"'),
        ("/admin/memoryhub/knowledgebase/", ">memory</a>"),
        ("/admin/memoryhub/knowledgebase/add/", 'name="on_write"'),
        ("/admin/memoryhub/memoryrecord/", "visible in the admin"),
        ("/admin/memoryhub/memoryrecord/add/", 'name="content"'),
        ("/admin/memoryhub/observation/", '<td class="field-kind">memory written'),
    ],
)
def test_admin_pages_render_for_a_superuser(admin_client, tenant, url, shown):
    from memoryhub.services import write
    from tests.factories import MembershipFactory, create_api_key

    write.write(tenant.scope, [{"content": "visible in the admin"}])
    MembershipFactory(org=tenant.org, user__username="site-operator")
    create_api_key(org=tenant.org, name="site bot")
    response = admin_client.get(url)
    assert response.status_code == 200
    assert shown in response.content.decode()


@pytest.mark.django_db
def test_staff_user_sees_only_their_orgs_records(client, tenant, other_tenant):
    from memoryhub.services import write
    from tests.factories import MembershipFactory

    write.write(tenant.scope, [{"content": "acme record"}])
    write.write(other_tenant.scope, [{"content": "globex record"}])
    membership = MembershipFactory(org=tenant.org, user__is_superuser=False)
    from django.contrib.auth.models import Permission

    membership.user.user_permissions.set(
        Permission.objects.filter(content_type__app_label__in=["memoryhub", "tenants"])
    )
    client.force_login(membership.user)
    page = client.get("/admin/memoryhub/memoryrecord/").content.decode()
    assert "acme record" in page
    assert "globex record" not in page
    from memoryhub.models import MemoryRecord

    foreign = MemoryRecord.unscoped.get(content="globex record")
    response = client.get(f"/admin/memoryhub/memoryrecord/{foreign.pk}/change/")
    assert response.status_code == 302  # the admin's "does not exist" redirect, never a 500
    orgs = client.get("/admin/tenants/org/").content.decode()
    assert "Acme" in orgs
    assert "Globex" not in orgs
