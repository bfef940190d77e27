"""The operator admin: pages, actions, imports, erasure and the playground, per tenant."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile

from memoryhub import policy
from memoryhub.exceptions import UnknownSource
from memoryhub.models import ImportJob, KnowledgeBase, MemoryRecord, Observation
from memoryhub.services import knowledge_bases, query, write
from memoryhub.services.imports import ImportFailed, chunk_markdown, parse
from tests.factories import MembershipFactory, create_api_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client, tenant):
    """A staff member of acme only, with every memoryhub/tenants permission."""
    user = MembershipFactory(org=tenant.org, user__is_staff=True).user
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label__in=["memoryhub", "tenants"])
    )
    client.force_login(user)
    return client


@pytest.fixture
def data(tenant, other_tenant):
    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    write.write(
        tenant.scope,
        [{"content": "acme handbook entry"}],
        sources=["handbook"],
        principal=policy.SYSTEM,
    )
    write.write(tenant.scope, [{"content": "alice likes tea", "namespace": "user:alice"}])
    knowledge_bases.ensure_knowledge_base(other_tenant.scope, "handbook", read_only=True)
    write.write(
        other_tenant.scope,
        [{"content": "globex secret entry"}],
        sources=["handbook"],
        principal=policy.SYSTEM,
    )
    return {
        "acme_kb": KnowledgeBase.unscoped.get(org=tenant.org, name="handbook"),
        "globex_kb": KnowledgeBase.unscoped.get(org=other_tenant.org, name="handbook"),
        "globex_record": MemoryRecord.unscoped.get(content="globex secret entry"),
    }


PAGES = [
    "/admin/memoryhub/knowledgebase/",
    "/admin/memoryhub/memoryrecord/",
    "/admin/memoryhub/observation/",
    "/admin/memoryhub/memoryrecord/playground/",
    "/admin/memoryhub/memoryrecord/erase-subject/",
    "/admin/tenants/org/",
    "/admin/tenants/domain/",
    "/admin/tenants/apikey/",
    "/admin/memoryhub/knowledgebase/import/",
    "/admin/",
    "/admin/memoryhub/",
]


def own_rows(tenant, data):
    """Per page, the markup that only acme's own rows (or its domain choice) produce."""
    acme_record = MemoryRecord.unscoped.get(content="acme handbook entry")
    acme_observation = Observation.unscoped.filter(org=tenant.org).earliest("created_at")
    domain_choice = f'<option value="{tenant.domain.pk}"'
    return {
        "/admin/memoryhub/knowledgebase/": f"/knowledgebase/{data['acme_kb'].pk}/change/",
        "/admin/memoryhub/memoryrecord/": f"/memoryrecord/{acme_record.pk}/change/",
        "/admin/memoryhub/observation/": f"/observation/{acme_observation.pk}/change/",
        "/admin/memoryhub/memoryrecord/playground/": domain_choice,
        "/admin/memoryhub/memoryrecord/erase-subject/": domain_choice,
        "/admin/tenants/org/": f"/tenants/org/{tenant.org.pk}/change/",
        "/admin/tenants/domain/": f"/tenants/domain/{tenant.domain.pk}/change/",
        "/admin/tenants/apikey/": "acme bot",
        "/admin/memoryhub/knowledgebase/import/": f'<option value="{data["acme_kb"].pk}"',
        "/admin/": 'data-domain="acme/support"',
        "/admin/memoryhub/": 'data-domain="acme/support"',
    }


@pytest.mark.parametrize("url", PAGES)
def test_operator_pages_show_only_their_org(operator, data, tenant, other_tenant, url):
    create_api_key(org=tenant.org, name="acme bot")
    create_api_key(org=other_tenant.org, name="globex bot")
    response = operator.get(url)
    assert response.status_code == 200
    page = response.content.decode()
    assert own_rows(tenant, data)[url] in page  # an empty page must not pass
    assert "globex" not in page.lower()


def test_foreign_objects_are_not_reachable(operator, data):
    kb, record = data["globex_kb"], data["globex_record"]
    for url in (
        f"/admin/memoryhub/knowledgebase/{kb.pk}/change/",
        f"/admin/memoryhub/memoryrecord/{record.pk}/change/",
        f"/admin/memoryhub/memoryrecord/{record.pk}/delete/",
    ):
        response = operator.get(url)
        assert response.status_code == 302, url  # the admin's "not found" redirect
    for url in (
        f"/admin/memoryhub/knowledgebase/{kb.pk}/import/",
        f"/admin/memoryhub/knowledgebase/{kb.pk}/export/",
    ):
        assert operator.get(url).status_code == 404, url
    form = operator.get("/admin/memoryhub/memoryrecord/add/").content.decode()
    assert "acme/support" in form or "handbook" in form
    assert "globex" not in form.lower()


def test_operator_cannot_add_a_record_to_a_foreign_kb(operator, data):
    response = operator.post(
        "/admin/memoryhub/memoryrecord/add/",
        {
            "knowledge_base": data["globex_kb"].pk,
            "namespace": "",
            "kind": "semantic",
            "content": "intrusion",
            "tags": "",
            "metadata": "{}",
        },
    )
    assert response.status_code == 200  # the form, with an error
    assert "Select a valid choice" in response.content.decode()
    assert not MemoryRecord.unscoped.filter(content="intrusion").exists()


def test_adding_a_record_goes_through_the_write_service(operator, data, tenant):
    response = operator.post(
        "/admin/memoryhub/memoryrecord/add/",
        {
            "knowledge_base": data["acme_kb"].pk,
            "namespace": "",
            "kind": "semantic",
            "content": "Curated fact",
            "tags": "ops",
            "metadata": '{"team": "ops"}',
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    record = MemoryRecord.unscoped.get(content="Curated fact")
    assert record.knowledge_base == data["acme_kb"]  # read-only does not bind operators
    assert record.tags == ["ops"]
    written = Observation.unscoped.filter(kind="memory.written", source="handbook").latest(
        "created_at"
    )
    assert written.payload["operator"] is True
    assert written.actor.startswith("admin:")


def test_record_form_uses_the_services_rules(operator, data):
    response = operator.post(
        "/admin/memoryhub/memoryrecord/add/",
        {
            "knowledge_base": data["acme_kb"].pk,
            "namespace": "",
            "kind": "semantic",
            "content": "   ",
            "tags": "",
            "metadata": "{}",
        },
    )
    assert response.status_code == 200
    assert not MemoryRecord.unscoped.filter(content="   ").exists()


def test_record_page_shows_embedding_summary_not_floats(operator, data, committed, tenant):
    [result] = committed(write.write, tenant.scope, [{"content": "embedded fact"}]).records
    page = operator.get(f"/admin/memoryhub/memoryrecord/{result.id}/change/").content.decode()
    assert "384 dimensions" in page
    assert "norm 1.0000" in page


def test_reembed_action_re_embeds_with_the_configured_model(operator, data, committed, tenant):
    [result] = committed(write.write, tenant.scope, [{"content": "to re-embed"}]).records
    indexed = MemoryRecord.unscoped.get(pk=result.id)
    configured, vector = indexed.embedding_model, list(indexed.embedding)
    stale = [1.0] + [0.0] * (len(vector) - 1)
    MemoryRecord.unscoped.filter(pk=result.id).update(embedding_model="retired", embedding=stale)
    response = committed(
        operator.post,
        "/admin/memoryhub/memoryrecord/",
        {"action": "reembed", "_selected_action": [result.id]},
    )
    assert response.status_code == 302
    record = MemoryRecord.unscoped.get(pk=result.id)
    assert (record.status, record.embedding_model) == ("indexed", configured)
    assert list(record.embedding) == pytest.approx(vector)


def test_deleting_a_record_in_the_admin_is_a_forget(operator, data, tenant):
    record = MemoryRecord.unscoped.get(content="alice likes tea")
    response = operator.post(f"/admin/memoryhub/memoryrecord/{record.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not MemoryRecord.unscoped.filter(pk=record.pk).exists()
    assert Observation.unscoped.filter(kind="memory.forgotten", org=tenant.org).exists()


def test_bulk_delete_of_records_goes_through_forget(operator, data, tenant):
    ids = list(MemoryRecord.unscoped.filter(org=tenant.org).values_list("pk", flat=True))
    operator.post(
        "/admin/memoryhub/memoryrecord/",
        {"action": "delete_selected", "_selected_action": ids, "post": "yes"},
    )
    assert MemoryRecord.unscoped.filter(org=tenant.org).count() == 0
    assert Observation.unscoped.filter(kind="memory.forgotten", org=tenant.org).count() == len(ids)
    assert MemoryRecord.unscoped.filter(content="globex secret entry").exists()


# --- import and export ------------------------------------------------------------------


def upload(name: str, text: str) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, text.encode(), content_type="text/plain")


def test_jsonl_import_and_export_round_trip(operator, data, committed):
    kb = data["acme_kb"]
    lines = "\n".join(
        json.dumps({"content": f"fact {n}", "key": f"k{n}", "metadata": {"n": n}}) for n in range(3)
    )
    response = committed(
        operator.post,
        f"/admin/memoryhub/knowledgebase/{kb.pk}/import/",
        {"file": upload("facts.jsonl", lines)},
    )
    assert response.status_code == 302
    assert MemoryRecord.unscoped.filter(knowledge_base=kb, key__startswith="k").count() == 3
    job = ImportJob.unscoped.get()
    assert (job.status, job.imported, job.chunks.count()) == ("done", 3, 0)
    exported = b"".join(
        operator.get(f"/admin/memoryhub/knowledgebase/{kb.pk}/export/").streaming_content
    ).decode()
    rows = [json.loads(line) for line in exported.splitlines()]
    assert {row["content"] for row in rows} >= {"fact 0", "fact 1", "fact 2", "acme handbook entry"}
    fact = next(row for row in rows if row["content"] == "fact 1")
    # When it occurred, unset on import: its creation time, so a re-import keeps it.
    created = MemoryRecord.unscoped.get(knowledge_base=kb, key="k1").created_at
    assert fact.pop("occurred_at") == created.isoformat()
    assert fact == {
        "content": "fact 1",
        "key": "k1",
        "kind": "semantic",
        "namespace": "",
        "metadata": {"n": 1},
    }


def test_a_bad_row_is_reported_with_its_line_and_nothing_is_imported(operator, data, committed):
    kb = data["acme_kb"]
    before = MemoryRecord.unscoped.filter(knowledge_base=kb).count()
    text = '{"content": "ok"}\n{"content": "also ok"}\n{"content": ""}\n'
    response = committed(
        operator.post,
        f"/admin/memoryhub/knowledgebase/{kb.pk}/import/",
        {"file": upload("bad.jsonl", text)},
    )
    assert response.status_code == 302
    page = operator.get(f"/admin/memoryhub/knowledgebase/{kb.pk}/change/").content.decode()
    assert "line 3: content: may not be blank." in page
    assert MemoryRecord.unscoped.filter(knowledge_base=kb).count() == before
    assert ImportJob.unscoped.get().status == "failed"


def test_a_file_that_is_not_text_is_refused_on_the_form(operator, data):
    kb = data["acme_kb"]
    for name, content, problem in [
        ("bad.jsonl", b"\xff\xfe not utf-8", "is not UTF-8 text."),
        ("nul.jsonl", b'{"content": "a\x00"}', "contains NUL characters"),
        ("empty.jsonl", b"  \n\n", "has nothing to import."),
    ]:
        response = operator.post(
            f"/admin/memoryhub/knowledgebase/{kb.pk}/import/",
            {"file": SimpleUploadedFile(name, content)},
        )
        assert response.status_code == 200
        assert problem in response.content.decode()
    assert not ImportJob.unscoped.exists()


def test_csv_import(operator, data, committed):
    kb = data["acme_kb"]
    text = 'content,key,tags,team\nRefunds take 5 days.,refunds,"billing,policy",support\n'
    committed(
        operator.post,
        f"/admin/memoryhub/knowledgebase/{kb.pk}/import/",
        {"file": upload("faq.csv", text)},
    )
    record = MemoryRecord.unscoped.get(key="refunds")
    assert (record.tags, record.metadata) == (["billing", "policy"], {"team": "support"})


def test_markdown_is_chunked_by_headings_and_size_with_overlap():
    long_body = " ".join(f"word{n}" for n in range(600))
    rows = chunk_markdown(
        f"intro text\n\n# Title\n\nshort\n\n## Long\n\n{long_body}\n", filename="doc.md"
    )
    headings = [row.item["metadata"]["heading"] for row in rows]
    assert headings[:2] == ["", "Title"]
    long_chunks = [row for row in rows if row.item["metadata"]["heading"] == "Long"]
    assert len(long_chunks) >= 3
    assert [row.item["metadata"]["chunk"] for row in long_chunks] == list(range(len(long_chunks)))
    first, second = long_chunks[0].item["content"], long_chunks[1].item["content"]
    assert first[-150:] in second  # overlap
    assert long_chunks[0].item["metadata"]["file"] == "doc.md"
    assert long_chunks[0].line == 7


def test_parse_errors_name_lines():
    with pytest.raises(ImportFailed) as raised:
        parse('{"content": "a"}\nnot json\n', "jsonl")
    assert list(raised.value.errors) == ["line 2"]
    with pytest.raises(ImportFailed):
        parse("title,body\nx,y\n", "csv")


def test_large_import_runs_as_a_job_with_progress(operator, data, settings, committed, tenant):
    from memoryhub.services import imports

    kb = data["acme_kb"]
    n = imports.BATCH_ITEMS * 2 + 50
    lines = "\n".join(json.dumps({"content": f"bulk fact {i}"}) for i in range(n))
    response = committed(
        operator.post,
        f"/admin/memoryhub/knowledgebase/{kb.pk}/import/",
        {"file": upload("bulk.jsonl", lines)},
    )
    assert response.status_code == 302
    job = ImportJob.unscoped.get()
    progress = operator.get(
        f"/admin/memoryhub/knowledgebase/{kb.pk}/import/{job.pk}/progress/"
    ).json()
    assert progress["status"] == "done"
    assert progress["imported"] == progress["total"] == progress["parsed"] == n
    assert progress["created"] == progress["indexed"] == n
    page = operator.get(f"/admin/memoryhub/knowledgebase/{kb.pk}/change/").content.decode()
    assert "bulk.jsonl" in page
    assert "<progress" in page


# --- erasure --------------------------------------------------------------------------------


def test_erase_subject_finds_a_users_namespace_without_telling_who_has_an_account(
    operator, data, tenant, other_tenant, django_user_model
):
    url = "/admin/memoryhub/memoryrecord/erase-subject/"
    bob = django_user_model.objects.create_user("bob", password="x")
    django_user_model.objects.create_user("carol", password="x")  # an account, no memory
    write.write(tenant.scope, [{"content": "bob likes coffee", "namespace": f"user:{bob.pk}"}])
    write.write(  # the other org's memory of bob is not this operator's to see
        other_tenant.scope, [{"content": "bob at globex", "namespace": f"user:{bob.pk}"}]
    )
    form = {"org": tenant.org.pk, "user": "bob"}
    page = operator.post(url, form).content.decode()
    assert 'id="erasure-preview"' in page and f"user:{bob.pk}" in page
    assert "Erase the memory of user" in page
    operator.post(url, {**form, "post": "yes"}, follow=True)
    assert not MemoryRecord.unscoped.filter(org=tenant.org, namespace=f"user:{bob.pk}").exists()
    assert MemoryRecord.unscoped.filter(org=other_tenant.org, namespace=f"user:{bob.pk}").exists()

    def answer(username: str) -> str:
        html = operator.post(url, {"org": tenant.org.pk, "user": username}).content.decode()
        body = html.split('id="content-main"', 1)[1].split("</div>", 1)[0]
        return body.replace(username, "NAME")

    # A user with no memory here and a name nobody has read the same.
    assert answer("carol") == answer("nobody-at-all")
    assert "Nothing to erase" in answer("carol") and "user:" not in answer("carol")
    both = operator.post(url, {"org": tenant.org.pk, "user": "bob", "namespace": "user:x"})
    assert "Give a namespace or a user, not both." in both.content.decode()


def test_erase_subject_confirms_then_erases_and_shows_a_receipt(operator, data, tenant):
    form = {"org": tenant.org.pk, "namespace": "user:alice"}
    first = operator.post("/admin/memoryhub/memoryrecord/erase-subject/", form)
    assert first.status_code == 200
    page = first.content.decode()
    assert 'id="erasure-preview"' in page
    assert MemoryRecord.unscoped.filter(namespace="user:alice").count() == 1  # nothing yet
    second = operator.post(
        "/admin/memoryhub/memoryrecord/erase-subject/", {**form, "post": "yes"}, follow=True
    )
    receipt = second.content.decode()
    assert "Erased 1 record." in receipt
    assert "alice likes tea" not in receipt
    assert MemoryRecord.unscoped.filter(namespace="user:alice").count() == 0
    # The receipt is a page of its own: refreshing it shows it again and erases nothing.
    write.write(tenant.scope, [{"content": "alice is back", "namespace": "user:alice"}])
    again = operator.get(second.redirect_chain[-1][0])
    assert "Erased 1 record." in again.content.decode()
    assert MemoryRecord.unscoped.filter(namespace="user:alice").count() == 1


def test_erase_subject_refuses_a_foreign_org(operator, data, other_tenant):
    response = operator.post(
        "/admin/memoryhub/memoryrecord/erase-subject/",
        {"org": other_tenant.org.pk, "namespace": "", "post": "yes"},
    )
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert MemoryRecord.unscoped.filter(content="globex secret entry").exists()


@pytest.mark.parametrize(("model", "field"), [("org", "org"), ("domain", "domain")])
def test_org_and_domain_erasure_actions(admin_client, data, tenant, model, field):
    target = tenant.org if model == "org" else tenant.domain
    changelist = f"/admin/tenants/{model}/"
    first = admin_client.post(
        changelist, {"action": "erase_memory", "_selected_action": [target.pk]}
    )
    assert first.status_code == 200
    assert "handbook" in first.content.decode()
    assert MemoryRecord.unscoped.filter(org=tenant.org).count() == 2
    second = admin_client.post(
        changelist,
        {"action": "erase_memory", "_selected_action": [target.pk], "post": "yes"},
        follow=True,
    )
    assert "Erased 2 records." in second.content.decode()
    assert MemoryRecord.unscoped.filter(org=tenant.org).count() == 0
    assert MemoryRecord.unscoped.filter(content="globex secret entry").exists()


def test_erasure_extends_the_tenants_admins_instead_of_registering_its_own():
    from django.contrib import admin

    from tenants.admin import DomainAdmin, OrgAdmin
    from tenants.models import Domain, Org

    assert type(admin.site.get_model_admin(Org)) is OrgAdmin
    assert type(admin.site.get_model_admin(Domain)) is DomainAdmin


@pytest.mark.parametrize("model", ["org", "domain"])
def test_bulk_deleting_orgs_or_domains_erases_their_memory_first(admin_client, data, tenant, model):
    target = tenant.org if model == "org" else tenant.domain
    response = admin_client.post(
        f"/admin/tenants/{model}/",
        {"action": "delete_selected", "_selected_action": [target.pk], "post": "yes"},
        follow=True,
    )
    assert "Erased 2 memory records before deleting." in response.content.decode()
    assert not type(target).objects.filter(pk=target.pk).exists()
    assert MemoryRecord.unscoped.filter(org=tenant.org).count() == 0
    assert MemoryRecord.unscoped.filter(content="globex secret entry").exists()


def test_deleting_a_kb_is_a_job_that_forgets_its_records_through_the_service(
    admin_client, data, tenant, committed
):
    from celery import current_app

    kb = data["acme_kb"]
    current_app.conf.task_always_eager = False  # a broker whose worker has not run yet
    try:
        response = committed(
            admin_client.post, f"/admin/memoryhub/knowledgebase/{kb.pk}/delete/", {"post": "yes"}
        )
    finally:
        current_app.conf.task_always_eager = True
    assert response.status_code == 302
    kb.refresh_from_db()
    assert kb.deleting_since is not None  # the request only marked it
    assert MemoryRecord.unscoped.filter(knowledge_base=kb).count() == 1
    listing = admin_client.get("/admin/memoryhub/knowledgebase/").content.decode()
    assert "handbook <em>(being deleted)</em>" in listing
    with pytest.raises(UnknownSource):  # no writes meanwhile
        write.write(
            tenant.scope, [{"content": "late"}], sources=["handbook"], principal=policy.SYSTEM
        )

    from memoryhub.services.forget import deletions_for_sweep
    from memoryhub.tasks import delete_knowledge_base

    assert kb.pk in deletions_for_sweep(older_than=timedelta(0))  # if the message was lost
    delete_knowledge_base(kb.pk, "admin:root")  # the worker, for the operator who asked
    assert not KnowledgeBase.unscoped.filter(pk=kb.pk).exists()
    audit = Observation.unscoped.get(kind="memory.forgotten", org=tenant.org)
    assert audit.payload["by_source"] == {"handbook": 1}
    assert audit.actor == "admin:root"
    assert MemoryRecord.unscoped.filter(content="globex secret entry").exists()


def test_after_erasure_no_trace_remains_anywhere(operator, data, tenant, committed):
    secret = "Alice's passport number is X1234567"
    committed(write.write, tenant.scope, [{"content": secret, "namespace": "user:alice"}])
    assert query.query(tenant.scope, query="passport number", namespaces=["user:alice"]).items
    committed(
        operator.post,
        "/admin/memoryhub/memoryrecord/erase-subject/",
        {"org": tenant.org.pk, "namespace": "user:alice", "post": "yes"},
    )
    assert not MemoryRecord.unscoped.filter(content__contains="passport").exists()
    assert query.query(tenant.scope, query="passport number", namespaces=["user:alice"]).items == []
    for url in (
        "/admin/memoryhub/memoryrecord/?q=passport",
        "/admin/memoryhub/memoryrecord/",
        "/admin/memoryhub/observation/",
    ):
        assert "x1234567" not in operator.get(url).content.decode().lower()
    for observation in Observation.unscoped.all():
        dump = json.dumps(observation.payload) + observation.source
        assert "x1234567" not in dump.lower()
        assert "user:alice" not in dump


# --- playground and observations ---------------------------------------------------------------


def test_playground_shows_items_grounding_and_filter_errors(operator, data, tenant):
    base = (
        f"/admin/memoryhub/memoryrecord/playground/?domain={tenant.domain.pk}"
        "&query=handbook+entry&mode=hybrid&k=5"
    )
    page = operator.get(base).content.decode()
    assert "acme handbook entry" in page
    assert "Relevant context:" in page
    bad = operator.get(base + "&where=" + '{"a": {"$regex": 1}}').content.decode()
    assert "where.a.$regex" in bad
    not_json = operator.get(base + "&where={oops").content.decode()
    assert "Not JSON" in not_json
    # The folded filters open when one holds a value or an error, never otherwise.
    folded = '<details id="playground-more">'
    assert folded in page and folded in operator.get(base + "&context_turns=0").content.decode()
    assert '<details id="playground-more" open>' in bad
    late = operator.get(base + "&occurred_after=2026-01-01").content.decode()
    assert '<details id="playground-more" open>' in late


def test_a_playground_link_naming_only_the_query_takes_the_forms_defaults(operator, data, tenant):
    """``?domain=…&query=…`` (a link an operator shares) searches as the empty form
    would, hybrid and 5 results, instead of answering that mode and k are required."""
    page = operator.get(
        f"/admin/memoryhub/memoryrecord/playground/?domain={tenant.domain.pk}&query=handbook+entry"
    ).content.decode()
    assert "This field is required" not in page
    assert "acme handbook entry" in page
    assert '<option value="hybrid" selected>' in page


def test_playground_refuses_a_foreign_domain(operator, data, other_tenant):
    page = operator.get(
        f"/admin/memoryhub/memoryrecord/playground/?domain={other_tenant.domain.pk}&query=secret&mode=hybrid&k=5"
    ).content.decode()
    assert "Select a valid choice" in page
    assert "globex secret entry" not in page


def test_observation_summary_counts_refusals_and_dedupes(operator, data, tenant):
    from memoryhub.exceptions import WriteRefused

    for _ in range(2):
        with pytest.raises(WriteRefused):
            write.write(tenant.scope, [{"content": "x"}], sources=["handbook"])
    write.write(tenant.scope, [{"content": "alice likes tea", "namespace": "user:alice"}])
    page = operator.get("/admin/memoryhub/observation/").content.decode()
    assert "<svg" in page
    assert "write refused (2)" in page
    assert "deduplicated on write (1)" in page
    refusal = Observation.unscoped.filter(org=tenant.org, kind="memory.write_refused").first()
    response = operator.get(f"/admin/memoryhub/observation/{refusal.pk}/change/")
    assert response.status_code == 200  # read-only, but viewable
    assert "write refused" in response.content.decode()
    assert operator.post("/admin/memoryhub/observation/add/", {}).status_code == 403


def test_api_key_admin_shows_the_key_once(admin_client, tenant):
    response = admin_client.post(
        "/admin/tenants/apikey/add/",
        {"name": "bot", "org": tenant.org.pk, "can_read": "on", "can_write": "on"},
        follow=True,
    )
    page = response.content.decode()
    assert 'id="new-api-key"' in page
    key = page.split('id="new-api-key">')[1].split("<")[0]
    from tenants.models import ApiKey

    assert ApiKey.objects.is_valid(key)
    listing = admin_client.get("/admin/tenants/apikey/").content.decode()
    assert key not in listing
    assert key.split(".")[0] in listing
    api_key = ApiKey.objects.get()
    admin_client.post(
        "/admin/tenants/apikey/", {"action": "revoke_keys", "_selected_action": [api_key.pk]}
    )
    api_key.refresh_from_db()
    assert api_key.revoked


def test_the_record_form_reads_json_as_the_api_does(operator, data):
    """A key given twice is the form's error (the API's too), never a silent last-wins."""
    response = operator.post(
        "/admin/memoryhub/memoryrecord/add/",
        {
            "knowledge_base": data["acme_kb"].pk,
            "namespace": "",
            "kind": "semantic",
            "content": "Twice-keyed",
            "tags": "",
            "metadata": '{"a": 1, "a": 2}',
        },
    )
    assert response.status_code == 200
    assert not MemoryRecord.unscoped.filter(content="Twice-keyed").exists()
