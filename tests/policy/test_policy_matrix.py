"""One policy, every door: who may do what to which org, through the real admin and API.

Each case performs an action through a real door (a logged-in admin session, or the DRF
client with an API key) on the actor's own org or on another org, and reports whether
the action took effect. The expected outcome comes from the table below, written out
here and not read from ``memoryhub.policy``: if a door stops asking the policy core (or
the policy changes), these tests go red. A refused action must change nothing and must
never be a 500.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from rest_framework.test import APIClient

from memoryhub import policy
from memoryhub.models import ArchiveJob, ImportJob, KnowledgeBase, MemoryRecord, Observation
from memoryhub.scope import Scope
from memoryhub.services import imports, knowledge_bases, write
from tenants.models import ApiKey, Domain, Membership, Org
from tests.factories import (
    DomainFactory,
    MembershipFactory,
    OrgFactory,
    UserFactory,
    create_api_key,
)

pytestmark = pytest.mark.django_db


@dataclass
class OrgData:
    org: Org
    domain: Domain
    spare_domain: Domain
    handbook: KnowledgeBase
    handbook_record: MemoryRecord
    alice_record: MemoryRecord
    api_key: ApiKey

    @property
    def slug(self) -> str:
        return self.org.slug


def _org(slug: str, domain_slug: str) -> OrgData:
    org = OrgFactory(slug=slug)
    domain = DomainFactory(org=org, slug=domain_slug)
    spare = DomainFactory(org=org, slug="spare")
    scope_ = Scope.for_domain(domain)
    handbook = knowledge_bases.ensure_knowledge_base(scope_, "handbook", read_only=True)
    [hb] = write.write(
        scope_,
        [{"content": f"{slug} handbook entry"}],
        sources=["handbook"],
        principal=policy.SYSTEM,
    ).records
    [alice] = write.write(
        scope_, [{"content": f"{slug} alice likes tea", "namespace": "user:alice"}]
    ).records
    write.write(Scope.for_domain(spare), [{"content": f"{slug} spare domain fact"}])
    MemoryRecord.unscoped.filter(pk=hb.id).update(attempts=3)
    api_key, _ = create_api_key(org=org, name=f"{slug} key")
    return OrgData(
        org=org,
        domain=domain,
        spare_domain=spare,
        handbook=handbook,
        handbook_record=MemoryRecord.unscoped.get(pk=hb.id),
        alice_record=MemoryRecord.unscoped.get(pk=alice.id),
        api_key=api_key,
    )


@pytest.fixture
def world(db: None) -> dict[str, OrgData]:
    # The other org's domain has its own slug: a key's org decides which "support" a
    # path names, so a probe of another org by slug is a probe of a slug the key's org
    # lacks (another org's record ids under the key's own slug: test_record_ids_...).
    return {"own": _org("acme", "support"), "other": _org("globex", "helpdesk")}


#: ``viewer_with_permissions`` also holds every Django model permission of both apps:
#: the role, not Django's permissions, decides.
ACTORS = ["superuser", "owner", "operator", "viewer", "viewer_with_permissions", "outsider"]


def _login(actor: str, world: dict[str, OrgData]) -> Client:
    client = Client()
    if actor == "superuser":
        user = UserFactory(username="root", is_superuser=True)
    elif actor == "outsider":
        user = UserFactory(username="outsider")
    else:
        role = actor.removesuffix("_with_permissions")
        user = MembershipFactory(
            org=world["own"].org, role=role, user__username=f"{actor}-user"
        ).user
    if actor.endswith("_with_permissions"):
        user.user_permissions.set(
            Permission.objects.filter(content_type__app_label__in=["memoryhub", "tenants"])
        )
    else:
        assert not user.user_permissions.exists()  # the role is the permission
    client.force_login(user)
    return client


# --- the actions, each through its admin door; each returns whether it took effect ---


def view_records(client: Client, data: OrgData) -> bool:
    response = client.get("/admin/memoryhub/memoryrecord/")
    assert response.status_code in (200, 302, 403)
    return response.status_code == 200 and data.handbook_record.content in response.text


def view_record_page(client: Client, data: OrgData) -> bool:
    response = client.get(f"/admin/memoryhub/memoryrecord/{data.handbook_record.pk}/change/")
    assert response.status_code in (200, 302, 403)
    return response.status_code == 200 and data.handbook_record.content in response.text


def playground(client: Client, data: OrgData) -> bool:
    response = client.get(
        "/admin/memoryhub/memoryrecord/playground/",
        {"domain": data.domain.pk, "query": "handbook entry", "mode": "keyword", "k": 5},
    )
    assert response.status_code in (200, 403)
    return response.status_code == 200 and data.handbook_record.content in response.text


def export(client: Client, data: OrgData) -> bool:
    response = client.get(f"/admin/memoryhub/knowledgebase/{data.handbook.pk}/export/")
    assert response.status_code in (200, 403, 404)
    return (
        response.status_code == 200
        and data.handbook_record.content in b"".join(response.streaming_content).decode()
    )


def view_observations(client: Client, data: OrgData) -> bool:
    response = client.get("/admin/memoryhub/observation/")
    assert response.status_code in (200, 403)
    return response.status_code == 200 and f"{data.slug}/{data.domain.slug}" in response.text


def add_record(client: Client, data: OrgData) -> bool:
    content = f"added {uuid.uuid4()}"
    response = client.post(
        "/admin/memoryhub/memoryrecord/add/",
        {
            "knowledge_base": data.handbook.pk,
            "namespace": "",
            "kind": "semantic",
            "content": content,
            "tags": "",
            "metadata": "{}",
        },
    )
    assert response.status_code in (200, 302, 403)
    return MemoryRecord.unscoped.filter(content=content).exists()


def change_record(client: Client, data: OrgData) -> bool:
    record = data.handbook_record
    response = client.post(
        f"/admin/memoryhub/memoryrecord/{record.pk}/change/",
        {
            "key": "",
            "kind": "semantic",
            "content": "changed by admin",
            "tags": "",
            "metadata": "{}",
        },
    )
    assert response.status_code in (200, 302, 403)
    return MemoryRecord.unscoped.get(pk=record.pk).content == "changed by admin"


def delete_record(client: Client, data: OrgData) -> bool:
    record = data.handbook_record
    response = client.post(f"/admin/memoryhub/memoryrecord/{record.pk}/delete/", {"post": "yes"})
    assert response.status_code in (200, 302, 403)
    return not MemoryRecord.unscoped.filter(pk=record.pk).exists()


def curate_knowledge_base(client: Client, data: OrgData) -> bool:
    kb = data.handbook
    response = client.post(
        f"/admin/memoryhub/knowledgebase/{kb.pk}/change/",
        {
            "name": kb.name,
            "description": "curated",
            "read_only": "on",
            "on_write": "refuse",
            "records-TOTAL_FORMS": "0",
            "records-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code in (200, 302, 403)
    return KnowledgeBase.unscoped.get(pk=kb.pk).description == "curated"


def import_file(client: Client, data: OrgData) -> bool:
    text = json.dumps({"content": "imported fact", "key": "imported"})
    response = client.post(
        f"/admin/memoryhub/knowledgebase/{data.handbook.pk}/import/",
        {"file": SimpleUploadedFile("facts.jsonl", text.encode())},
    )
    assert response.status_code in (200, 302, 403, 404)
    for job in ImportJob.unscoped.filter(status=ImportJob.Status.QUEUED):
        imports.run_job(job.pk)  # the worker's side
    return MemoryRecord.unscoped.filter(knowledge_base=data.handbook, key="imported").exists()


def reembed(client: Client, data: OrgData) -> bool:
    record = data.handbook_record  # attempts=3 (the fixture): re-embedding resets it
    response = client.post(
        "/admin/memoryhub/memoryrecord/",
        {"action": "reembed", "_selected_action": [str(record.pk)]},
    )
    assert response.status_code in (200, 302, 403)
    return MemoryRecord.unscoped.get(pk=record.pk).attempts == 0


def erase_subject(client: Client, data: OrgData) -> bool:
    response = client.post(
        "/admin/memoryhub/memoryrecord/erase-subject/",
        {"org": data.org.pk, "namespace": "user:alice", "post": "yes"},
    )
    assert response.status_code in (200, 302, 403)
    return not MemoryRecord.unscoped.filter(pk=data.alice_record.pk).exists()


def export_subject(client: Client, data: OrgData) -> bool:
    response = client.post(
        "/admin/memoryhub/memoryrecord/export-subject/",
        {"org": data.org.pk, "namespace": "user:alice"},
    )
    assert response.status_code in (200, 403)
    if not response.streaming:
        return False
    document = json.loads(b"".join(response.streaming_content))
    return str(data.alice_record.pk) in {line["id"] for line in document["records"]}


def export_archive(client: Client, data: OrgData) -> bool:
    response = client.post("/admin/memoryhub/archivejob/export/", {"org": data.org.pk})
    assert response.status_code in (200, 302, 403)
    return ArchiveJob.unscoped.filter(org=data.org, kind="export").exists()


def import_archive(client: Client, data: OrgData) -> bool:
    archive = b'{"format": "memoryhub-archive", "version": 1}\n'
    response = client.post(
        "/admin/memoryhub/archivejob/import/",
        {"file": SimpleUploadedFile("org.jsonl", archive), "org": data.org.pk},
    )
    assert response.status_code in (200, 302, 403)
    return ArchiveJob.unscoped.filter(org=data.org, kind="import").exists()


def erase_domain_memory(client: Client, data: OrgData) -> bool:
    response = client.post(
        "/admin/tenants/domain/",
        {"action": "erase_memory", "_selected_action": [data.spare_domain.pk], "post": "yes"},
    )
    assert response.status_code in (200, 302, 403)
    return not MemoryRecord.unscoped.filter(domain=data.spare_domain).exists()


def add_api_key(client: Client, data: OrgData) -> bool:
    response = client.post(
        "/admin/tenants/apikey/add/", {"name": "new bot", "org": data.org.pk, "can_read": "on"}
    )
    assert response.status_code in (200, 302, 403)
    return ApiKey.objects.filter(org=data.org, name="new bot").exists()


def revoke_api_key(client: Client, data: OrgData) -> bool:
    response = client.post(
        "/admin/tenants/apikey/", {"action": "revoke_keys", "_selected_action": [data.api_key.pk]}
    )
    assert response.status_code in (200, 302, 403)
    return ApiKey.objects.get(pk=data.api_key.pk).revoked


def add_member(client: Client, data: OrgData) -> bool:
    newcomer = UserFactory(username=f"newcomer-{data.slug}")
    response = client.post(
        "/admin/tenants/membership/add/",
        {"user": newcomer.pk, "org": data.org.pk, "role": "operator"},
    )
    assert response.status_code in (200, 302, 403)
    return Membership.objects.filter(user=newcomer, org=data.org).exists()


def rename_org(client: Client, data: OrgData) -> bool:
    response = client.post(
        f"/admin/tenants/org/{data.org.pk}/change/",
        {
            "slug": data.org.slug,
            "name": "Renamed",
            "external_ref": "",
            "is_active": "on",
            "domains-TOTAL_FORMS": "0",
            "domains-INITIAL_FORMS": "0",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code in (200, 302, 403)
    return Org.objects.get(pk=data.org.pk).name == "Renamed"


def delete_domain(client: Client, data: OrgData) -> bool:
    response = client.post(f"/admin/tenants/domain/{data.spare_domain.pk}/delete/", {"post": "yes"})
    assert response.status_code in (200, 302, 403)
    gone = not Domain.objects.filter(pk=data.spare_domain.pk).exists()
    # Deleting a domain never leaves its memory behind (the erasure path ran first).
    assert gone == (not MemoryRecord.unscoped.filter(domain_id=data.spare_domain.pk).exists())
    return gone


def delete_org(client: Client, data: OrgData) -> bool:
    response = client.post(f"/admin/tenants/org/{data.org.pk}/delete/", {"post": "yes"})
    assert response.status_code in (200, 302, 403)
    return not Org.objects.filter(pk=data.org.pk).exists()


ADMIN_ACTIONS: dict[str, Callable[[Client, OrgData], bool]] = {
    "view_records": view_records,
    "view_record_page": view_record_page,
    "playground": playground,
    "export": export,
    "view_observations": view_observations,
    "add_record": add_record,
    "change_record": change_record,
    "delete_record": delete_record,
    "curate_knowledge_base": curate_knowledge_base,
    "import_file": import_file,
    "reembed": reembed,
    "erase_subject": erase_subject,
    "export_subject": export_subject,
    "export_archive": export_archive,
    "import_archive": import_archive,
    "erase_domain_memory": erase_domain_memory,
    "add_api_key": add_api_key,
    "revoke_api_key": revoke_api_key,
    "add_member": add_member,
    "rename_org": rename_org,
    "delete_domain": delete_domain,
    "delete_org": delete_org,
}

READS = {"view_records", "view_record_page", "playground", "export", "view_observations"}
OPERATES = READS | {
    "add_record",
    "change_record",
    "delete_record",
    "curate_knowledge_base",
    "import_file",
    "reembed",
    "erase_subject",
    "export_subject",
    "export_archive",
    "import_archive",
    "erase_domain_memory",
    "add_api_key",
    "revoke_api_key",
}
OWNS = OPERATES | {"add_member", "rename_org", "delete_domain", "delete_org"}
#: The role matrix of docs/explanation/policy.md, in the actor's own org (the test below
#: reads the page's table back). In another org: nothing, except for superusers, who may
#: do everything everywhere.
ALLOWED_IN_OWN_ORG = {
    "superuser": OWNS,
    "owner": OWNS,
    "operator": OPERATES,
    "viewer": READS,
    "viewer_with_permissions": READS,
    "outsider": set(),
}


@pytest.mark.parametrize("where", ["own", "other"])
@pytest.mark.parametrize("action", sorted(ADMIN_ACTIONS))
@pytest.mark.parametrize("actor", ACTORS)
def test_admin_door_asks_the_policy(world, actor, action, where):
    client = _login(actor, world)
    expected = action in ALLOWED_IN_OWN_ORG[actor] and (where == "own" or actor == "superuser")
    data = world[where]
    before = _state(world)
    took_effect = ADMIN_ACTIONS[action](client, data)
    assert took_effect == expected, f"{actor} {action} in {where} org"
    if not expected:
        assert _state(world) == before, "a refused action changed something"


def _state(world: dict[str, OrgData]) -> dict[str, Any]:
    """Everything an action could change, for "a refusal changed nothing"."""
    return {
        "records": sorted(MemoryRecord.unscoped.values_list("id", "content", "status", "attempts")),
        "kbs": sorted(KnowledgeBase.unscoped.values_list("id", "name", "description")),
        "keys": sorted(ApiKey.objects.values_list("id", "revoked")),
        "members": sorted(Membership.objects.values_list("user_id", "org_id", "role")),
        "domains": sorted(Domain.objects.values_list("id", "slug")),
        "orgs": sorted(Org.objects.values_list("id", "name")),
    }


def test_admin_index_shows_an_operator_their_models_without_django_permissions(world):
    client = _login("operator", world)
    page = client.get("/admin/").text
    assert "You don’t have permission" not in page and "permission to view" not in page
    for name in ("Knowledge bases", "Memory records", "Observations", "API keys"):
        assert name in page, name


def test_a_viewer_sees_no_action_buttons(world):
    client = _login("viewer", world)
    records = client.get("/admin/memoryhub/memoryrecord/").text
    assert "Erase a data subject" not in records
    assert "Re-embed selected records" not in records
    assert "Add memory record" not in records
    kb_page = client.get(f"/admin/memoryhub/knowledgebase/{world['own'].handbook.pk}/change/").text
    assert "Import a file" not in kb_page
    assert "Export JSONL" in kb_page
    assert client.get("/admin/memoryhub/memoryrecord/erase-subject/").status_code == 403
    keys = client.get("/admin/tenants/apikey/").text
    assert "Revoke selected API keys" not in keys


# --- the API door -------------------------------------------------------------------------


def _api(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    return client


def api_query(client: APIClient, data: OrgData) -> bool:
    response = client.post(
        f"/api/v1/domains/{data.domain.slug}/query",
        {"query": "handbook entry", "mode": "keyword"},
        format="json",
    )
    return response.status_code == 200 and data.handbook_record.content in response.text


def api_list(client: APIClient, data: OrgData) -> bool:
    response = client.get(f"/api/v1/domains/{data.domain.slug}/records")
    return response.status_code == 200 and data.alice_record.content in response.text


def api_get(client: APIClient, data: OrgData) -> bool:
    response = client.get(f"/api/v1/domains/{data.domain.slug}/records/{data.alice_record.pk}")
    return response.status_code == 200 and data.alice_record.content in response.text


def api_sources(client: APIClient, data: OrgData) -> bool:
    response = client.get(f"/api/v1/domains/{data.domain.slug}/sources")
    return response.status_code == 200 and "handbook" in response.text


def api_namespaces(client: APIClient, data: OrgData) -> bool:
    response = client.get(f"/api/v1/domains/{data.domain.slug}/namespaces")
    return response.status_code == 200 and data.alice_record.namespace in response.text


def api_write(client: APIClient, data: OrgData) -> bool:
    client.post(
        f"/api/v1/domains/{data.domain.slug}/records",
        {"items": [{"content": "written by a key", "key": "api-written"}]},
        format="json",
    )
    return MemoryRecord.unscoped.filter(domain=data.domain, key="api-written").exists()


def api_patch(client: APIClient, data: OrgData) -> bool:
    client.patch(
        f"/api/v1/domains/{data.domain.slug}/records/{data.alice_record.pk}",
        {"content": "patched by a key"},
        format="json",
    )
    return MemoryRecord.unscoped.get(pk=data.alice_record.pk).content == "patched by a key"


def api_delete(client: APIClient, data: OrgData) -> bool:
    client.delete(f"/api/v1/domains/{data.domain.slug}/records/{data.alice_record.pk}")
    return not MemoryRecord.unscoped.filter(pk=data.alice_record.pk).exists()


def api_forget_subject(client: APIClient, data: OrgData) -> bool:
    client.post(
        f"/api/v1/domains/{data.domain.slug}/forget", {"namespace": "user:alice"}, format="json"
    )
    return not MemoryRecord.unscoped.filter(pk=data.alice_record.pk).exists()


API_ACTIONS: dict[str, tuple[str, Callable[[APIClient, OrgData], bool]]] = {
    "query": ("read", api_query),
    "list": ("read", api_list),
    "get": ("read", api_get),
    "sources": ("read", api_sources),
    "namespaces": ("read", api_namespaces),
    "write": ("write", api_write),
    "patch": ("write", api_patch),
    "delete": ("forget", api_delete),
    "forget_subject": ("forget", api_forget_subject),
}
KEYS = {
    "read": {"can_read": True},
    "write": {"can_read": False, "can_write": True},
    "forget": {"can_read": False, "can_forget": True},
    "read_write_forget": {"can_read": True, "can_write": True, "can_forget": True},
    "bound_to_other_domain": {
        "can_read": True,
        "can_write": True,
        "can_forget": True,
        "bound": True,
    },
}


@pytest.mark.parametrize("where", ["own", "other"])
@pytest.mark.parametrize("action", sorted(API_ACTIONS))
@pytest.mark.parametrize("key_kind", sorted(KEYS))
def test_api_door_asks_the_policy(world, key_kind, action, where):
    options = dict(KEYS[key_kind])
    bound = options.pop("bound", False)
    own = world["own"]
    if bound:
        options["domain"] = own.spare_domain
    _, key = create_api_key(org=own.org, name=key_kind, **options)
    client = _api(key)
    permission, perform = API_ACTIONS[action]
    granted = {"read": "can_read", "write": "can_write", "forget": "can_forget"}[permission]
    expected = bool(options.get(granted)) and not bound and where == "own"
    before = _state(world)
    assert perform(client, world[where]) == expected, f"{key_kind} {action} in {where}"
    if not expected:
        assert _state(world) == before


@pytest.mark.parametrize("role", ["owner", "operator", "viewer", "outsider"])
def test_staff_sessions_in_the_browsable_api_follow_the_role(world, role):
    client = APIClient()
    user = (
        UserFactory(username="api-outsider")
        if role == "outsider"
        else MembershipFactory(org=world["own"].org, role=role, user__username=f"{role}-api").user
    )
    client.force_login(user)
    own, other = world["own"], world["other"]
    can_read = role != "outsider"
    can_change = role in ("owner", "operator")
    assert api_list(client, own) == can_read
    assert api_write(client, own) == can_change
    assert api_forget_subject(client, own) == can_change
    for perform in (api_list, api_write, api_forget_subject):
        assert not perform(client, other)
    response = client.post(
        f"/api/v1/domains/{own.domain.slug}/forget", {"namespace": "user:alice"}, format="json"
    )
    assert response.status_code in (200, 403, 404)


def test_inactive_users_have_no_role(world):
    user = MembershipFactory(org=world["own"].org, role="owner", user__username="gone").user
    get_user_model().objects.filter(pk=user.pk).update(is_active=False)
    client = Client()
    client.force_login(user)
    assert client.get("/admin/memoryhub/memoryrecord/").status_code == 302  # to login


def test_record_ids_of_another_org_are_404_under_the_keys_own_domain(world):
    own, other = world["own"], world["other"]
    _, key = create_api_key(org=own.org, can_read=True, can_write=True, can_forget=True)
    client = _api(key)
    before = _state(world)
    url = f"/api/v1/domains/{own.domain.slug}/records/{other.alice_record.pk}"
    for response in (
        client.get(url),
        client.patch(url, {"content": "x"}, format="json"),
        client.put(url, {"content": "x"}, format="json"),
        client.delete(url),
    ):
        assert response.status_code == 404
        assert response.json()["code"] == "record_not_found"
    assert _state(world) == before


#: Each row of the page's role table, as the admin actions above that it covers.
ROLE_TABLE_ROWS = {
    "see records, knowledge bases, observations, keys; playground; export": READS,
    "add, edit and delete records; curate knowledge bases (read-only ones too)": {
        "add_record",
        "change_record",
        "delete_record",
        "curate_knowledge_base",
    },
    "import files; re-embed records": {"import_file", "reembed"},
    "erase a data subject; erase a domain's or org's memory": {
        "erase_subject",
        "erase_domain_memory",
    },
    "export a data subject (their access export)": {"export_subject"},
    "export an org's archive; import an archive": {"export_archive", "import_archive"},
    "create, change and revoke the org's API keys": {"add_api_key", "revoke_api_key"},
    "add, change and remove members and their roles": {"add_member"},
    "rename the org, add domains; delete a domain or the org (memory erased first)": {
        "rename_org",
        "delete_domain",
        "delete_org",
    },
}


def test_the_documented_role_table_is_the_one_this_matrix_checks():
    """docs/explanation/policy.md's table of membership roles says, row by row, what
    ALLOWED_IN_OWN_ORG says: a change to either that the other lacks fails here."""
    page = (Path(__file__).resolve().parents[2] / "docs/explanation/policy.md").read_text()
    section = page.split("## Membership roles", 1)[1]
    header, _rule, *rows = [line for line in section.splitlines() if line.startswith("|")][
        : 2 + len(ROLE_TABLE_ROWS) + 1
    ]
    roles = [cell.strip() for cell in header.strip("|").split("|")][1:]
    assert roles == ["viewer", "operator", "owner"]
    documented: dict[str, set[str]] = {role: set() for role in roles}
    seen = set()
    for row in rows:
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        if cells[0] not in ROLE_TABLE_ROWS:
            assert "superusers only" in row, row  # the one row no membership grants
            continue
        seen.add(cells[0])
        for role, mark in zip(roles, cells[1:], strict=True):
            if mark == "✓":
                documented[role] |= ROLE_TABLE_ROWS[cells[0]]
    assert seen == set(ROLE_TABLE_ROWS)
    assert set().union(*ROLE_TABLE_ROWS.values()) == set(ADMIN_ACTIONS)
    for role in roles:
        assert documented[role] == ALLOWED_IN_OWN_ORG[role], role


def test_the_read_only_rule_binds_by_principal_not_by_door(world):
    """Through the same REST door: a session of the org's operator curates the read-only
    handbook (the policy lets it), a key with every permission is refused."""
    own = world["own"]
    url = f"/api/v1/domains/{own.domain.slug}/records"
    body = {"source": "handbook", "items": [{"content": "curated through the API"}]}
    curator = APIClient()
    curator.force_login(
        MembershipFactory(org=own.org, role="operator", user__username="curator-api").user
    )
    assert curator.post(url, body, format="json").status_code == 202
    _, key = create_api_key(org=own.org, can_read=True, can_write=True, can_forget=True)
    refused = _api(key).post(url, body, format="json")
    assert refused.status_code == 403
    assert refused.json()["code"] == "write_refused"
    written = Observation.unscoped.filter(kind="memory.written", org=own.org).latest("created_at")
    assert (written.actor, written.payload["operator"]) == ("user:curator-api", True)
