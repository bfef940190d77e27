"""One identifier rule at every door: a namespace, key, tag or knowledge base name with a
control character (a newline, ESC) or an invisible format character (a zero-width space,
a bidi control, a BOM) is a 400 naming the field, and nothing is written; content may
hold newlines. Names stored before the rule are listed by a command."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from memoryhub import policy
from memoryhub.exceptions import ValidationFailed
from memoryhub.models import ImportJob, MemoryRecord
from memoryhub.services import imports, knowledge_bases, write
from tests.factories import key_client

pytestmark = pytest.mark.django_db

RECORDS = "/api/v1/domains/support/records"
LOOK_ALIKES = [
    "user:alice\u200b",
    "user:alice\n",
    "user:\u001b[2J",
    "user:\u202eecila",
    "\ufeffuser:alice",
]


@pytest.mark.parametrize("namespace", LOOK_ALIKES)
def test_rest_refuses_an_invisible_namespace_naming_the_field(tenant, other_tenant, namespace):
    api = key_client(tenant, can_write=True)
    body = {
        "items": [
            {"content": "fine", "namespace": "user:bob"},
            {"content": "x", "namespace": namespace},
        ]
    }

    response = api.post(RECORDS, body, format="json")

    assert response.status_code == 400
    assert "items[1].namespace" in response.json()["errors"]
    assert not MemoryRecord.unscoped.exists()


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"content": "x", "key": "plan\u200d"}, "items[0].key"),
        ({"content": "x", "tags": ["ok", "ta\u0007g"]}, "items[0].tags[1]"),
    ],
)
def test_keys_and_tags_follow_the_same_rule(tenant, item, field):
    with pytest.raises(ValidationFailed) as refused:
        write.write(tenant.scope, [item])
    assert field in refused.value.errors


def test_a_knowledge_base_name_follows_it_and_content_keeps_its_newlines(tenant):
    api = key_client(tenant, can_write=True)
    named = api.post(
        RECORDS, {"source": "hand\u200bbook", "items": [{"content": "x"}]}, format="json"
    )
    assert named.status_code == 400 and "sources[0]" in named.json()["errors"]

    ok = api.post(
        RECORDS,
        {"items": [{"content": "line one\nline two", "namespace": "user:alice"}]},
        format="json",
    )
    assert ok.status_code == 202


def test_an_import_line_with_an_invisible_namespace_is_its_lines_error(tenant):
    knowledge_base = knowledge_bases.ensure_knowledge_base(tenant.scope, "memory")
    text = "\n".join(
        json.dumps(line)
        for line in (
            {"content": "fine", "namespace": "user:bob"},
            {"content": "x", "namespace": "user:alice\u200b"},
        )
    )
    job = imports.create_job(
        tenant.scope,
        knowledge_base,
        text=text,
        format="jsonl",
        filename="f.jsonl",
        principal=policy.AgentPrincipal(label="admin:ops"),
    )
    imports.run_job(job.pk)
    job.refresh_from_db()
    assert job.status == ImportJob.Status.FAILED
    assert list(job.errors) == ["line 2"]
    assert not MemoryRecord.unscoped.exists()


def stored_before_the_rule(tenant, **fields: object) -> None:
    """A record as an earlier release stored it, past today's validation."""
    MemoryRecord.unscoped.create(
        org_id=tenant.org.pk,
        domain_id=tenant.domain.pk,
        knowledge_base=knowledge_bases.ensure_knowledge_base(tenant.scope, "memory"),
        content="stored by an earlier release",
        content_hash="h",
        **fields,
    )


def test_names_stored_before_the_rule_are_listed(tenant, other_tenant):
    write.write(tenant.scope, [{"content": "fine", "namespace": "user:alice", "tags": ["ok"]}])
    assert call_command("memoryhub_invisible_names", stdout=io.StringIO()) is None  # none
    stored_before_the_rule(tenant, namespace="user:alice\u200b", key="plan\n", tags=["t\u202e"])
    out = io.StringIO()
    with pytest.raises(SystemExit) as status:
        call_command("memoryhub_invisible_names", stdout=out, stderr=io.StringIO())
    assert status.value.code == 1
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert any("namespace 'user:alice\\\\u200b': 1 record(s)" in line for line in lines)
    assert all(line.startswith("acme/support ") for line in lines)


def test_the_admins_knowledge_base_form_follows_it(client, tenant):
    from tests.factories import MembershipFactory

    client.force_login(MembershipFactory(org=tenant.org, role="operator", user__is_staff=True).user)
    response = client.post(
        "/admin/memoryhub/knowledgebase/add/",
        {
            "domain": tenant.domain.pk,
            "name": "hand\u200bbook",
            "description": "",
            "on_write": "refuse",
        },
    )
    assert response.status_code == 200  # the form again, with the error
    assert "name" in response.context["adminform"].form.errors  # a slug: ASCII only
    from memoryhub.models import KnowledgeBase

    assert not KnowledgeBase.unscoped.filter(name__startswith="hand").exists()


def test_the_admins_namespace_filter_shows_a_stored_escape_never_the_raw_character(
    admin_client, tenant
):
    stored_before_the_rule(tenant, namespace="user:\u001b[2J")
    page = admin_client.get("/admin/memoryhub/memoryrecord/").content.decode()
    assert "\u001b" not in page
    assert "user:\\x1b[2J" in page
