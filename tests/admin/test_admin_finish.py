"""An admin that looks finished: each page shows what it says once, in one date format,
in readable colours and plain words, and leads where its buttons say. Every page here
is read by a member of acme while globex has data of its own, which never shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone
from django.utils.formats import date_format

from memoryhub import policy
from memoryhub.models import ImportJob, MemoryRecord, Observation
from memoryhub.services import knowledge_bases, updates, write
from tests.factories import DomainFactory, MembershipFactory

pytestmark = pytest.mark.django_db

KBS = "/admin/memoryhub/knowledgebase/"
RECORDS = "/admin/memoryhub/memoryrecord/"


@pytest.fixture
def kbs(tenant, other_tenant):
    handbook = knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook")
    write.write(tenant.scope, [{"content": "refunds take five days"}], sources=["handbook"])
    vault = knowledge_bases.ensure_knowledge_base(other_tenant.scope, "globex-vault")
    write.write(other_tenant.scope, [{"content": "globex secret"}], sources=["globex-vault"])
    return {"handbook": handbook, "vault": vault}


# --- 1. the app page shows the operator home once ---------------------------------------


@pytest.mark.parametrize("url", ["/admin/", "/admin/memoryhub/"])
def test_the_operator_home_is_shown_once(operator, kbs, url):
    page = operator.get(url).content.decode()
    assert page.count('id="memoryhub-home"') == 1
    assert page.count('id="mh-domains"') == 1
    assert "globex" not in page


# --- 2. readable colours ----------------------------------------------------------------


def test_the_homes_text_colours_are_text_colours_not_backgrounds(operator, kbs):
    page = operator.get("/admin/").content.decode()
    style = re.search(r'<div id="memoryhub-home">\s*<style>(.*?)</style>', page, re.S)
    assert style is not None
    # "color:" itself, not "background-color:" or "border-color:".
    text_colours = re.findall(r"(?<![-\w])color:\s*([^;}]*)", style.group(1))
    assert text_colours
    for colour in text_colours:
        assert "-bg" not in colour, colour  # a theme background used as a text colour


# --- 4. an import's counts and what became of its lines ---------------------------------


def upload(name: str, text: str) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, text.encode(), content_type="application/octet-stream")


@pytest.fixture
def imported(operator, kbs, tenant, committed, settings, monkeypatch):
    """40 lines into acme's handbook: 3 repeat a record already there, 2 repeat an
    earlier line of the file, 1 updates a record by its key."""
    from memoryhub.services import imports

    handbook = kbs["handbook"]
    write.write(
        tenant.scope,
        [
            {"content": "existing 0"},
            {"content": "existing 1"},
            {"content": "existing 2"},
            {"content": "keyed v1", "key": "k"},
        ],
        sources=["handbook"],
    )
    lines = [{"content": f"fact {i}"} for i in range(34)]
    lines += [{"content": f"existing {i}"} for i in range(3)]
    lines += [{"content": "fact 0"}, {"content": "fact 1"}]
    lines += [{"content": "keyed v2", "key": "k"}]
    assert len(lines) == 40
    settings.MEMORYHUB = {**settings.MEMORYHUB, "MAX_WRITE_ITEMS": 5}
    monkeypatch.setattr(imports.jobs, "BATCH_ITEMS", 10)  # four batches, each two writes of five
    response = committed(
        operator.post,
        f"{KBS}{handbook.pk}/import/",
        {"file": upload("facts.jsonl", "\n".join(json.dumps(line) for line in lines))},
    )
    assert response.status_code == 302
    return ImportJob.unscoped.get(knowledge_base=handbook)


def test_an_import_says_what_became_of_its_lines(operator, kbs, imported):
    handbook = kbs["handbook"]
    assert imported.status == ImportJob.Status.DONE
    assert MemoryRecord.unscoped.filter(import_job=imported).count() == 34
    progress = operator.get(f"{KBS}{handbook.pk}/import/{imported.pk}/progress/").json()
    assert progress["outcome"] == {"created": 34, "updated": 1, "deduplicated": 5}
    summary = progress["summary"]
    assert "40 items in the file" in summary
    assert "34 new records" in summary
    assert "5 were duplicates of records already in this knowledge base" in summary
    assert "were skipped" in summary
    assert "1 updated the record with the same key" in summary
    page = operator.get(f"{KBS}{handbook.pk}/change/").content.decode()
    assert summary in page.replace("&#x27;", "'")
    assert "globex" not in page


def test_the_kb_pages_record_count_follows_its_imports(operator, kbs, imported):
    """The contents' counts are the page's, and move with each import's created and
    indexed counts as they are polled (the page's script adds what each import created
    since the page was read), so they never say 0 beside a finished import."""
    page = operator.get(f"{KBS}{kbs['handbook'].pk}/change/").content.decode()
    records = MemoryRecord.unscoped.filter(knowledge_base=kbs["handbook"])
    total, pending = records.count(), records.filter(status="pending").count()
    assert f'id="kb-contents" data-total="{total}" data-pending="{pending}"' in page
    assert re.search(rf'<td id="kb-records"><a href="[^"]+">{total}</a>', page)
    assert 'data-created="34" data-indexed="34"' in page
    # The script is a file (the site's Content-Security-Policy runs no inline script).
    assert "memoryhub/admin/knowledge_base.js" in page
    from django.contrib.staticfiles import finders

    script = Path(finders.find("memoryhub/admin/knowledge_base.js")).read_text()
    assert 'querySelector("#kb-records a").textContent = total' in script


# --- 5. the home's Import button reaches an import form ---------------------------------


def test_the_homes_import_button_opens_an_import_form(operator, kbs, tenant, committed):
    home = operator.get("/admin/").content.decode()
    href = re.search(r'<a class="button" id="mh-import" href="([^"]+)"', home)
    assert href is not None
    form = operator.get(href.group(1)).content.decode()
    assert 'id="import-form"' in form and 'name="file"' in form
    choices = re.search(r'<select name="knowledge_base".*?</select>', form, re.S)
    assert choices is not None
    # Only acme's knowledge bases; the only one is already chosen.
    assert re.findall(r"<option[^>]*>([^<]*)</option>", choices.group()) == [
        "---------",
        "acme / support / handbook",
    ]
    assert f'<option value="{kbs["handbook"].pk}" selected>' in choices.group()
    response = committed(
        operator.post,
        href.group(1),
        {
            "knowledge_base": kbs["handbook"].pk,
            "file": upload("notes.jsonl", json.dumps({"content": "from the home"})),
        },
    )
    assert response.status_code == 302
    assert response["Location"].startswith(f"{KBS}{kbs['handbook'].pk}/change/#import-")
    assert MemoryRecord.unscoped.filter(content="from the home", org=tenant.org).exists()


def test_the_import_form_refuses_another_orgs_knowledge_base(operator, kbs):
    response = operator.post(
        f"{KBS}import/",
        {"knowledge_base": kbs["vault"].pk, "file": upload("x.jsonl", '{"content": "x"}')},
    )
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert not ImportJob.unscoped.exists()


def test_a_viewer_gets_no_import_form(client, tenant, kbs):
    viewer = MembershipFactory(org=tenant.org, role="viewer", user__is_staff=True).user
    client.force_login(viewer)
    assert 'id="mh-import"' not in client.get("/admin/").content.decode()
    assert client.get(f"{KBS}import/").status_code == 403


# --- 6. an import is one summary in the observations, not one row per batch -----------


def test_an_import_records_one_summary_observation_of_each_kind(operator, kbs, imported):
    rows = Observation.unscoped.filter(
        org_id=imported.org_id,
        kind__in=[Observation.Kind.MEMORY_WRITTEN, Observation.Kind.MEMORY_DEDUPLICATED],
        created_at__gte=imported.created_at,
    )
    by_kind = {row.kind: row for row in rows}
    assert rows.count() == 2, list(rows.values_list("kind", "count"))
    written = by_kind[Observation.Kind.MEMORY_WRITTEN]
    assert (written.count, written.payload["created"], written.payload["updated"]) == (35, 34, 1)
    assert written.payload["import_job"] == imported.pk
    assert written.actor.startswith("admin:")
    deduplicated = by_kind[Observation.Kind.MEMORY_DEDUPLICATED]
    assert deduplicated.count == 5 and deduplicated.source == "handbook"
    # The dedupes still count on the home page's domain row (last 24 hours).
    home = operator.get("/admin/").content.decode()
    row = re.search(r'data-domain="acme/support">(.*?)</tr>', home, re.S)
    assert row is not None and "5 / 5" in row.group(1)


# --- 7. one date format -----------------------------------------------------------------


def test_every_date_is_shown_in_the_admins_one_format(operator, kbs, tenant, imported):
    from memoryhub.services.forget import ForgetRequest, forget

    write.write(tenant.scope, [{"content": "alice likes tea", "namespace": "user:alice"}])
    forget(
        tenant.scope,
        ForgetRequest(namespace="user:alice"),
        principal=policy.SystemPrincipal(label="admin:x"),
    )
    record = MemoryRecord.unscoped.filter(knowledge_base=kbs["handbook"]).first()
    pages = {
        "/admin/": [imported.created_at],
        "/admin/memoryhub/erasurereceipt/": [],
        RECORDS: [record.updated_at],
        f"{RECORDS}{record.pk}/change/": [record.updated_at],
    }
    from memoryhub.models import ErasureReceipt

    receipt = ErasureReceipt.unscoped.get(org_id=tenant.org.pk)
    pages[f"/admin/memoryhub/erasurereceipt/batch/{receipt.batch}/"] = [receipt.created_at]
    pages["/admin/memoryhub/erasurereceipt/"] = [receipt.created_at]
    for url, moments in pages.items():
        page = operator.get(url).content.decode()
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", page))  # as it reads
        for moment in moments:
            shown = date_format(timezone.localtime(moment), "DATETIME_FORMAT")
            assert shown in text, (url, shown)
        # No other spelling of a date: ISO dates, or Django's short format.
        assert not re.search(r"\b20\d\d-\d\d-\d\d[ T]\d\d:\d\d", page), url
        assert not re.search(r"\b\d\d/\d\d/20\d\d\b", page), url
    chart = operator.get("/admin/memoryhub/observation/").content.decode()
    today = date_format(timezone.localdate(), "DATE_FORMAT")
    assert 'id="chart-x-end"' in chart and today in chart
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", chart)


# --- 8. the receipt's download says what it is ------------------------------------------


def test_the_receipts_download_is_named_for_what_it_is(operator, tenant):
    from memoryhub.services.forget import ForgetRequest, forget

    write.write(tenant.scope, [{"content": "alice likes tea", "namespace": "user:alice"}])
    result = forget(tenant.scope, ForgetRequest(namespace="user:alice"), principal=policy.SYSTEM)
    from memoryhub.models import ErasureReceipt

    receipt = ErasureReceipt.unscoped.get(pk=result.receipt)
    page = operator.get(f"/admin/memoryhub/erasurereceipt/batch/{receipt.batch}/").content
    assert "Download receipt (JSON)" in page.decode()
    assert "(JSON)</a>" in page.decode() and "Download support" not in page.decode()
    one = operator.get(f"/admin/memoryhub/erasurereceipt/{receipt.pk}/change/").content.decode()
    assert re.search(r'id="receipt-download">Download receipt \(JSON\)</a>', one)
    listed = operator.get("/admin/memoryhub/erasurereceipt/").content.decode()
    assert 'title="Download receipt (JSON)">Download (JSON)</a>' in listed
    assert ">download<" not in listed


# --- 9. the erase form speaks the operator's language -----------------------------------


def test_the_erase_form_has_no_python_path(operator, tenant):
    page = operator.get(f"{RECORDS}erase-subject/").content.decode()
    assert 'id="erase-subject-form"' in page
    assert not re.search(r"\b[a-z_]+\.[a-z_]+\.[a-z_]+\b", re.sub(r"<[^>]*>", " ", page))


# --- 10. a choice of one starts on it ---------------------------------------------------


def test_single_choice_selects_start_on_their_only_option(operator, tenant, kbs):
    org, domain, handbook = tenant.org, tenant.domain, kbs["handbook"]
    pages = {
        f"{RECORDS}erase-subject/": ("org", org.pk),
        f"{RECORDS}playground/": ("domain", domain.pk),
        f"{RECORDS}add/": ("knowledge_base", handbook.pk),
        f"{KBS}add/": ("domain", domain.pk),
        "/admin/tenants/apikey/add/": ("org", org.pk),
    }
    for url, (name, pk) in pages.items():
        page = operator.get(url).content.decode()
        select = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', page, re.S)
        assert select is not None, url
        assert f'<option value="{pk}" selected>' in select.group(1), (url, select.group(1))
        label = re.search(rf'<label[^>]*for="id_{name}"[^>]*>([^<]*)</label>', page)
        assert label is not None and label.group(1)[0].isupper(), (url, label)
        assert "globex" not in page


def test_a_choice_of_several_still_starts_blank(operator, tenant, kbs):
    DomainFactory(org=tenant.org, slug="sales")
    page = operator.get(f"{RECORDS}playground/").content.decode()
    select = re.search(r'<select name="domain"[^>]*>(.*?)</select>', page, re.S)
    assert select is not None and " selected>" in select.group(1)  # the blank
    assert '<option value="" selected>' in select.group(1)


# --- 11. the playground explains the score once -----------------------------------------


@pytest.mark.parametrize(
    ("mode", "words"), [("hybrid", "vector weight"), ("vector", "cosine similarity")]
)
def test_the_playground_explains_the_score_once(operator, tenant, kbs, mode, words):
    from urllib.parse import urlencode

    query = {"domain": tenant.domain.pk, "query": "refunds", "mode": mode, "k": 5}
    page = operator.get(f"{RECORDS}playground/?{urlencode(query)}").content.decode()
    assert 'id="playground-score-help"' in page
    assert page.count(words) == 2  # the paragraph, and the Score header's hover text
    help_text = re.search(r'id="playground-score-help">(.*?)</p>', page, re.S)
    assert help_text is not None and words in help_text.group(1)
    form = re.search(r'<form method="get" id="playground-form"[^>]*>.*?</form>', page, re.S)
    assert form is not None and words not in form.group()


@pytest.mark.parametrize("mode", ["hybrid", "vector", "keyword"])
def test_the_playground_explains_how_it_searched(operator, tenant, kbs, mode):
    """Its results said "hybrid+exact" and "#1 · 0.2734" without a word on either."""
    from urllib.parse import urlencode

    query = {"domain": tenant.domain.pk, "query": "refunds", "mode": mode, "k": 5}
    page = operator.get(f"{RECORDS}playground/?{urlencode(query)}").content.decode()
    shown = re.search(r'id="playground-strategy-help">(.*?)</p>', page, re.S)
    assert shown is not None
    text = re.sub(r"<[^>]+>", "", shown.group(1))
    heading = re.search(r"<h2>[^<]*· ([\w+-]+)", page)
    assert heading is not None
    for part in heading.group(1).split("+"):
        assert re.search(rf"\b{re.escape(part)}: \w", text), (part, text)
    assert "#n is the item's rank in that leg" in text


# --- 12. no "View site" that loops back -------------------------------------------------


def test_the_user_links_lead_out_of_the_admin_not_back_into_it(operator, kbs):
    page = operator.get("/admin/").content.decode()
    tools = re.search(r'<div id="user-tools">(.*?)</div>', page, re.S)
    assert tools is not None
    assert "View site" not in tools.group(1)
    assert 'href="/api/docs/"' in tools.group(1)
    assert operator.get("/api/docs/").status_code == 200


# --- bounded at volume ------------------------------------------------------------------


def test_the_kb_list_counts_records_only_up_to_its_cap(operator, kbs, monkeypatch):
    """A knowledge base of a million records is counted up to the cap, not read whole."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memoryhub.admin.knowledge import KnowledgeBaseAdmin

    write.write(_acme(kbs), [{"content": f"more {i}"} for i in range(3)], sources=["handbook"])
    monkeypatch.setattr(KnowledgeBaseAdmin, "RECORDS_COUNTED_UP_TO", 2)
    with CaptureQueriesContext(connection) as queries:
        page = operator.get(KBS).content.decode()
    assert '<td class="field-record_count">2+</td>' in page
    counts = [q["sql"] for q in queries if 'FROM "memoryhub_memoryrecord"' in q["sql"]]
    assert counts and all("LIMIT 3" in sql for sql in counts), counts
    assert "globex" not in page


def _acme(kbs):
    from memoryhub.scope import Scope

    handbook = kbs["handbook"]
    return Scope(handbook.org_id, handbook.domain_id)


# --- the demo's embedder says what it is -------------------------------------------------


def test_a_lexical_embedder_is_named_as_a_stand_in_where_operators_rank(
    operator, kbs, settings, client
):
    """The default hashing embedder matches words, not meaning: the home, the playground
    and health say so, and say nothing of the kind for a model of meaning."""
    from urllib.parse import urlencode

    from memoryhub.conf import memoryhub_settings

    query = {"domain": kbs["handbook"].domain_id, "query": "refunds", "mode": "hybrid", "k": 5}
    playground = f"{RECORDS}playground/?{urlencode(query)}"
    home = operator.get("/admin/").content.decode()
    assert re.search(r'id="mh-embedder">.*?hashing-384-c35.*?a lexical stand-in', home, re.S)
    assert 'id="playground-lexical"' in operator.get(playground).content.decode()
    assert client.get("/api/v1/health").json()["embedder"]["lexical"] is True

    class Meaningful:
        name, dimensions = "meaningful-384", 384

    memoryhub_settings._embedder = Meaningful()
    try:
        home = operator.get("/admin/").content.decode()
        assert re.search(r'id="mh-embedder">\s*Embedder: meaningful-384\s*</p>', home)
        assert "lexical stand-in" not in home
        assert client.get("/api/v1/health").json()["embedder"]["lexical"] is False
    finally:
        memoryhub_settings.reload()


@pytest.mark.parametrize("year", ["2147483648", "9999", "99999999999999999999"])
def test_a_date_hierarchy_year_no_date_holds_is_a_wrong_lookup_not_a_500(operator, year):
    response = operator.get(f"/admin/memoryhub/erasurereceipt/?created_at__year={year}")
    assert response.status_code == 302
    assert response["Location"].endswith("?e=1")
    assert operator.get("/admin/memoryhub/erasurereceipt/?created_at__year=2026").status_code == 200


def test_a_records_history_button_opens_its_version_history(operator, tenant, other_tenant):
    """Django's own history page said "This object doesn't have a change history" while
    the record's versions were at the bottom of its page."""
    [record] = write.write(tenant.scope, [{"content": "v1", "key": "plan"}]).records
    write.write(tenant.scope, [{"content": "v2", "key": "plan"}])
    [theirs] = write.write(other_tenant.scope, [{"content": "globex", "key": "plan"}]).records
    change = f"/admin/memoryhub/memoryrecord/{record.id}/change/"
    assert f'href="/admin/memoryhub/memoryrecord/{record.id}/history/"' in (
        operator.get(change).content.decode()
    )

    response = operator.get(f"/admin/memoryhub/memoryrecord/{record.id}/history/")
    assert response.status_code == 302
    assert response["Location"] == f"{change}#mh-history"
    page = operator.get(response["Location"]).content.decode()
    assert 'id="mh-history"' in page and "v1" in page
    # Another org's record: no page, no redirect to it.
    probe = operator.get(f"/admin/memoryhub/memoryrecord/{theirs.id}/history/")
    assert probe.status_code == 404


def test_the_receipts_search_finds_an_erased_namespace(operator, tenant, other_tenant):
    """It answered "0 results" for a namespace just erased: receipts hold its keyed
    hash, which only the separate lookup computed."""
    from memoryhub.services.forget import ForgetRequest, forget

    for scope in (tenant.scope, other_tenant.scope):
        write.write(scope, [{"content": "alice likes tea", "namespace": "user:alice"}])
    ours = forget(tenant.scope, ForgetRequest(namespace="user:alice"), principal=policy.SYSTEM)
    theirs = forget(
        other_tenant.scope, ForgetRequest(namespace="user:alice"), principal=policy.SYSTEM
    )
    page = operator.get("/admin/memoryhub/erasurereceipt/?q=user:alice")
    assert page.status_code == 200
    shown = page.context["cl"].result_list
    assert [str(receipt.pk) for receipt in shown] == [str(ours.receipt)]
    assert str(theirs.receipt) not in page.content.decode()
    assert "found by its keyed hash" in page.content.decode()
    nothing = operator.get("/admin/memoryhub/erasurereceipt/?q=user:bob").context["cl"]
    assert list(nothing.result_list) == []


def test_a_knowledge_bases_refusals_are_one_count_wherever_shown(operator, tenant, other_tenant):
    """The home summed the refused records (7) where the knowledge base, its list and
    GET /sources counted refusals (4)."""
    from rest_framework.test import APIClient

    from memoryhub.exceptions import WriteRefused
    from memoryhub.models import KnowledgeBase
    from memoryhub.services import overview
    from tests.factories import create_api_key

    handbook = knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook")
    [kept] = write.write(
        tenant.scope, [{"content": "refunds: 5 days"}], sources=["handbook"]
    ).records
    KnowledgeBase.unscoped.filter(pk=handbook.pk).update(read_only=True)
    globex = knowledge_bases.ensure_knowledge_base(other_tenant.scope, "handbook")
    KnowledgeBase.unscoped.filter(pk=globex.pk).update(read_only=True)
    with pytest.raises(WriteRefused):
        write.write(other_tenant.scope, [{"content": "x"}], sources=["handbook"])
    for items in ([{"content": f"n{n}"} for n in range(3)], [{"content": "one"}]):
        with pytest.raises(WriteRefused):
            write.write(tenant.scope, items, sources=["handbook"])
    with pytest.raises(WriteRefused):
        updates.update_record(tenant.scope, kept.id, {"content": "x"}, partial=True)

    handbook.refresh_from_db()
    assert handbook.refused_writes == 3
    [row] = [
        row
        for row in overview.overview(policy.SYSTEM)["domains"]
        if row["domain"].pk == tenant.scope.domain_id
    ]
    assert (row["refused_day"], row["refused_week"]) == (3, 3)
    _, key = create_api_key(org=tenant.org, can_read=True)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    sources = api.get("/api/v1/domains/support/sources").json()
    assert [s["refused_writes"] for s in sources if s["name"] == "handbook"] == [3]
    listed = operator.get("/admin/memoryhub/knowledgebase/").content.decode()
    assert re.search(r'field-refused_writes">3<', listed), "the list's count"
