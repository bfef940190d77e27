"""A data subject's access export (GDPR Art. 15 and 20) through each door: REST with a
key holding the export permission, the admin's "Export a data subject", and the Python
API. It holds every record of the subject's namespace across the domain's knowledge
bases (read-only ones and superseded facts included) with its history, the facts derived
from them elsewhere, and their erasures; nothing of another namespace or org."""

from __future__ import annotations

import json

import pytest

from memoryhub import policy
from memoryhub.exceptions import PolicyDenied, ValidationFailed
from memoryhub.models import MemoryRecord, Observation
from memoryhub.scope import Scope
from memoryhub.services import knowledge_bases, updates, write
from memoryhub.services.forget import ForgetRequest, forget, salted_hash
from memoryhub.services.subjects import access_export
from tests.factories import DomainFactory, MembershipFactory, key_client

pytestmark = pytest.mark.django_db

URL = "/api/v1/domains/support/export"


@pytest.fixture
def alice(committed, tenant, other_tenant):
    """Alice's memory in two knowledge bases (one read-only) and two domains, a fact of
    hers superseded, one updated, a fact derived from her turns in a team namespace, a
    forgotten key; Bob's memory beside it; another org's Alice."""
    scope = tenant.scope
    knowledge_bases.ensure_knowledge_base(scope, "handbook", read_only=True)
    committed(
        write.write,
        scope,
        [{"content": "Alice's handbook entry", "namespace": "user:alice"}],
        sources=["handbook"],
        principal=policy.SYSTEM,
    )
    for content in ("Alice lives in Paris", "Alice lives in Berlin"):
        committed(
            write.write,
            scope,
            [{"content": content, "key": "city", "namespace": "user:alice", "supersede": True}],
        )
    turn = committed(
        write.write,
        scope,
        [{"content": "Alice said she prefers tea", "kind": "episodic", "namespace": "user:alice"}],
    ).record_ids[0]
    committed(
        updates.update_record,
        scope,
        turn,
        {"content": "Alice said she prefers green tea"},
        partial=True,
    )
    team = committed(
        write.write, scope, [{"content": "The team serves green tea", "namespace": "team:ops"}]
    ).record_ids[0]
    MemoryRecord.unscoped.filter(pk=team).update(derived_from=[turn])
    bob_turn = committed(
        write.write, scope, [{"content": "Bob drinks coffee", "namespace": "user:bob"}]
    ).record_ids[0]
    mixed = committed(
        write.write, scope, [{"content": "The team drinks both", "namespace": "team:ops"}]
    ).record_ids[0]
    MemoryRecord.unscoped.filter(pk=mixed).update(derived_from=[turn, bob_turn])
    committed(
        write.write, scope, [{"content": "Alice's pin", "key": "pin", "namespace": "user:alice"}]
    )
    committed(
        forget,
        scope,
        ForgetRequest(namespace="user:alice", key="pin"),
        principal=policy.SystemPrincipal(label="admin:op"),
    )
    committed(write.write, scope, [{"content": "Bob's secret", "namespace": "user:bob"}])
    sales = DomainFactory(org=tenant.org, slug="sales")
    committed(
        write.write,
        Scope.for_domain(sales),
        [{"content": "Alice bought the pro plan", "namespace": "user:alice"}],
    )
    committed(
        write.write,
        other_tenant.scope,
        [{"content": "Globex's Alice", "namespace": "user:alice"}],
    )
    return tenant


def exported(response) -> dict:
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    return json.loads(b"".join(response.streaming_content))


def test_a_key_with_export_gets_everything_of_the_subject_and_nothing_else(alice):
    document = exported(
        key_client(alice, can_export=True).post(URL, {"namespace": "user:alice"}, format="json")
    )
    stored = MemoryRecord.unscoped.filter(
        org=alice.org, domain=alice.domain, namespace="user:alice"
    )
    assert {line["id"] for line in document["records"]} == {
        str(pk) for pk in stored.values_list("id", flat=True)
    }
    contents = {line["content"] for line in document["records"]}
    assert contents == {
        "Alice's handbook entry",
        "Alice lives in Paris",
        "Alice lives in Berlin",
        "Alice said she prefers green tea",
    }
    assert {line["knowledge_base"] for line in document["records"]} == {"handbook", "memory"}
    paris = next(line for line in document["records"] if line["content"] == "Alice lives in Paris")
    assert paris["valid_until"] is not None and paris["superseded_by"] is not None
    turn = next(line for line in document["records"] if "tea" in line["content"])
    assert [state["content"] for state in turn["versions"]] == ["Alice said she prefers tea"]
    whole, cited = sorted(document["derived_elsewhere"], key=lambda line: "cites" in line)
    assert whole["content"] == "The team serves green tea"
    # A fact that also cites another person's record is given as its citation only.
    assert set(cited) == {"id", "domain", "knowledge_base", "cites"}
    assert cited["cites"] == [turn["id"]]
    assert [e["deleted"] for e in document["erasures"]] == [1]
    assert document["counts"] == {"records": 4, "derived_elsewhere": 2, "erasures": 1}
    assert (document["subject"], document["org"], document["domains"]) == (
        {"namespace": "user:alice"},
        "acme",
        ["support"],
    )
    text = json.dumps(document)
    assert "Bob" not in text and "Globex" not in text and "pro plan" not in text
    assert "drinks both" not in text
    # What a listing of each knowledge base in her namespace returns, record for record.
    client = key_client(alice)
    listed = set()
    for source in ("memory", "handbook"):
        page = client.get(
            "/api/v1/domains/support/records", {"namespace": "user:alice", "source": source}
        )
        listed |= {item["id"] for item in page.json()["results"]}
    assert listed == {line["id"] for line in document["records"]}
    # The export is logged, naming her by keyed hash only.
    logged = Observation.unscoped.get(kind="subject.exported")
    assert logged.payload == {"namespace": salted_hash("user:alice"), "records": 4}
    assert "alice" not in json.dumps(logged.payload) and logged.actor.startswith("api-key:")


def test_without_the_permission_or_outside_the_keys_reach_it_is_refused(alice, other_tenant):
    body = {"namespace": "user:alice"}
    for permissions in ({}, {"can_write": True, "can_forget": True}):
        refused = key_client(alice, **permissions).post(URL, body, format="json")
        assert refused.status_code == 403 and refused.json()["code"] == "permission_denied"
    # Another org's key with every permission: its own Alice only.
    theirs = exported(key_client(other_tenant, can_export=True).post(URL, body, format="json"))
    assert [line["content"] for line in theirs["records"]] == ["Globex's Alice"]
    # A key bound to another domain of the org does not see this one.
    sales = alice.org.domains.get(slug="sales")
    bound = key_client(alice, can_export=True, domain=sales).post(URL, body, format="json")
    assert bound.status_code in (403, 404)
    assert "Alice" not in bound.content.decode()
    assert not Observation.unscoped.filter(kind="subject.exported", org=alice.org).exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "namespace"),
        ({"namespace": ""}, "namespace"),
        ({"namespace": 7}, "namespace"),
        ({"namespace": "user:alice\x00"}, "namespace"),
        ({"namespace": "user:alice", "sources": ["memory"]}, "sources"),
    ],
)
def test_a_bad_request_is_a_400_naming_the_field(alice, body, field):
    answer = key_client(alice, can_export=True).post(URL, body, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["errors"]


def test_the_admin_exports_across_the_orgs_domains(alice, client, other_tenant):
    operator = MembershipFactory(org=alice.org, role="operator", user__is_staff=True).user
    client.force_login(operator)
    page = client.get("/admin/memoryhub/memoryrecord/")
    assert "Export a data subject" in page.content.decode()
    response = client.post(
        "/admin/memoryhub/memoryrecord/export-subject/",
        {"org": alice.org.pk, "namespace": "user:alice"},
    )
    document = exported(response)
    assert "attachment" in response["Content-Disposition"]
    assert document["domains"] == ["sales", "support"]
    assert "Alice bought the pro plan" in {line["content"] for line in document["records"]}
    assert "Globex" not in json.dumps(document)
    # Another org's domain is no choice of this operator's form.
    foreign = client.post(
        "/admin/memoryhub/memoryrecord/export-subject/",
        {"org": other_tenant.org.pk, "namespace": "user:alice"},
    )
    assert foreign.status_code == 200 and "Select a valid choice" in foreign.content.decode()
    # A namespace the form takes but the rules refuse is the form's error, not a 500.
    invisible = client.post(
        "/admin/memoryhub/memoryrecord/export-subject/",
        {"org": alice.org.pk, "namespace": "user:a\u200bb"},
    )
    assert invisible.status_code == 200 and "errorlist" in invisible.content.decode()
    # A viewer may read records, not export a person.
    viewer = MembershipFactory(org=alice.org, role="viewer", user__is_staff=True).user
    client.force_login(viewer)
    assert client.get("/admin/memoryhub/memoryrecord/export-subject/").status_code == 403
    assert (
        "Export a data subject" not in client.get("/admin/memoryhub/memoryrecord/").content.decode()
    )


def test_the_python_api_asks_the_policy_and_checks_the_namespace(alice):
    domains = [alice.domain]
    reader = policy.KeyPrincipal(
        org_id=alice.org.pk, domain_id=None, permissions=frozenset({"read"})
    )
    with pytest.raises(PolicyDenied):
        access_export(domains, "user:alice", principal=reader)
    with pytest.raises(ValidationFailed):
        access_export(domains, "")
    document = json.loads("".join(access_export(domains, "user:alice")))
    assert document["counts"]["records"] == 4
