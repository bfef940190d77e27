"""The admin's lists and forms read as Django admin users expect, and their new filters
and choices never name another org's knowledge bases, namespaces or actors."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.test import RequestFactory

from memoryhub import policy
from memoryhub.admin.records import preview
from memoryhub.models import MemoryRecord
from memoryhub.services import knowledge_bases
from tests.factories import (
    DomainFactory,
    KnowledgeBaseFactory,
    MembershipFactory,
    MemoryRecordFactory,
)

pytestmark = pytest.mark.django_db

RECORDS = "/admin/memoryhub/memoryrecord/"


@pytest.fixture
def two_orgs(tenant, other_tenant):
    """acme/support/handbook with records in three namespaces; globex/support/vault with
    a namespace and knowledge base whose names must never reach an acme user."""
    handbook = KnowledgeBaseFactory(domain=tenant.domain, name="handbook")
    MemoryRecordFactory(knowledge_base=handbook, namespace="", content="shared fact")
    for n in range(2):
        MemoryRecordFactory(knowledge_base=handbook, namespace="user:alice", content=f"alice {n}")
    MemoryRecordFactory(knowledge_base=handbook, namespace="team:ops", content="ops fact")
    vault = KnowledgeBaseFactory(domain=other_tenant.domain, name="globex-vault")
    MemoryRecordFactory(knowledge_base=vault, namespace="user:globex-ceo", content="secret")
    return {"handbook": handbook, "vault": vault}


def filter_choices(page: str, parameter: str) -> list[str]:
    """The values a change-list filter offers (its links' ``parameter=...``)."""
    return re.findall(rf"[?&amp;]{re.escape(parameter)}=([^&\"]*)", page)


# --- 1. the record form's knowledge base choices ------------------------------------------


def test_record_form_labels_knowledge_bases_org_domain_name(operator, two_orgs):
    page = operator.get(RECORDS + "add/").content.decode()
    handbook = two_orgs["handbook"].pk
    # The only choice starts selected.
    assert f'<option value="{handbook}" selected>acme / support / handbook</option>' in page
    assert "globex" not in page


def test_record_form_knowledge_base_choices_cost_one_query(
    acme_user, tenant, two_orgs, django_assert_num_queries
):
    KnowledgeBaseFactory(domain=DomainFactory(org=tenant.org, slug="sales"), name="pricing")
    model_admin = admin.site.get_model_admin(MemoryRecord)
    request = RequestFactory().get(RECORDS + "add/")
    request.user = acme_user
    policy.principal_for_user(acme_user).org_ids_allowing(policy.Action.CURATE)  # memberships
    field = model_admin.get_form(request)().fields["knowledge_base"]
    with django_assert_num_queries(1):
        labels = [label for value, label in field.choices if value]
    assert labels == ["acme / sales / pricing", "acme / support / handbook"]


# --- 2. the records change list ------------------------------------------------------------


def test_preview_cuts_at_a_word_boundary():
    text = "word " * 40
    short = preview(text)
    assert len(short) <= 120
    assert short.endswith("word…")
    assert preview("a\n  short\ttext") == "a short text"
    assert preview("x" * 200).endswith("x…")  # one long word is cut inside it


def test_record_list_shows_content_with_its_details_source_and_state(operator, tenant, two_orgs):
    """Three columns, the content taking the room: under it the namespace, key, tags and
    kind; the source with its org/domain; the status with when it was last updated."""
    long_content = "The refund policy " + "applies to every order placed online " * 6
    MemoryRecordFactory(
        knowledge_base=two_orgs["handbook"],
        key="refunds",
        namespace="team:billing",
        tags=["billing", "policy"],
        content=long_content,
    )
    page = operator.get(RECORDS).content.decode()
    columns = re.findall(r'<th scope="col" class="[^"]*column-(\w+)', page)
    assert columns == ["short_content", "source", "state"]
    row = re.search(r"<tr>(?:(?!</tr>).)*The refund policy.*?</tr>", page, re.S)
    assert row is not None
    details = re.search(r'<div class="mh-details">(.*?)</div>', row.group())
    assert details is not None
    assert details.group(1) == (
        "team:billing · key <strong>refunds</strong> · tags billing, policy · semantic"
    )
    assert re.search(
        r'<td class="field-source">handbook<div class="mh-details">acme/support</div></td>',
        row.group(),
    )
    assert re.search(r'<td class="field-state"><span class="mh-status-\w+">', row.group())
    assert f'title="{long_content}"' in page  # the full text on hover
    shown = re.search(r'title="The refund policy[^"]*">([^<]*)</span>', page)
    assert shown is not None
    cut = shown.group(1)
    assert cut.endswith("…") and len(cut) <= 120
    assert long_content.startswith(cut[:-1] + " ")  # cut between two words


def test_record_list_does_not_count_every_row_twice(operator, two_orgs):
    page = operator.get(RECORDS + "?namespace=user%3Aalice").content.decode()
    assert "2 memory records" in page
    assert "4 total" not in page  # show_full_result_count = False


def test_record_list_queries_do_not_grow_with_rows(operator, tenant, two_orgs):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as few:
        operator.get(RECORDS)
    for n in range(5):
        knowledge_base = KnowledgeBaseFactory(domain=tenant.domain, name=f"kb-{n}")
        MemoryRecordFactory.create_batch(4, knowledge_base=knowledge_base, tags=["t"])
    with CaptureQueriesContext(connection) as many:
        operator.get(RECORDS)
    assert len(many) == len(few)


def test_namespace_filter_offers_the_visible_namespaces_most_used_first(operator, two_orgs):
    page = operator.get(RECORDS).content.decode()
    offered = filter_choices(page, "namespace")
    assert offered == ["user%3Aalice", "", "team%3Aops"]  # 2 records, then 1 by name
    assert "(shared)" in page
    assert "globex" not in page


def test_namespace_filter_filters_including_the_shared_namespace(operator, two_orgs):
    alice = operator.get(RECORDS + "?namespace=user%3Aalice").content.decode()
    assert "alice 0" in alice and "alice 1" in alice and "ops fact" not in alice
    shared = operator.get(RECORDS + "?namespace=").content.decode()
    assert "shared fact" in shared and "alice 0" not in shared


def test_namespace_filter_is_bounded_to_twenty(operator, two_orgs):
    for n in range(25):
        MemoryRecordFactory(knowledge_base=two_orgs["handbook"], namespace=f"user:{n:02d}")
    offered = filter_choices(operator.get(RECORDS).content.decode(), "namespace")
    assert len(offered) == 20
    assert offered[0] == "user%3Aalice"


def test_namespace_filter_follows_the_domain_and_knowledge_base_filters(operator, tenant, two_orgs):
    sales = KnowledgeBaseFactory(domain=DomainFactory(org=tenant.org, slug="sales"), name="crm")
    MemoryRecordFactory(knowledge_base=sales, namespace="team:sales")
    everywhere = filter_choices(operator.get(RECORDS).content.decode(), "namespace")
    assert "team%3Asales" in everywhere
    for query in (
        f"?domain__id__exact={tenant.domain.pk}",
        f"?knowledge_base__id__exact={two_orgs['handbook'].pk}",
    ):
        offered = filter_choices(operator.get(RECORDS + query).content.decode(), "namespace")
        assert "team%3Asales" not in offered, query
        assert "user%3Aalice" in offered, query


def test_a_foreign_domain_in_the_url_offers_no_foreign_namespace(operator, other_tenant, two_orgs):
    page = operator.get(RECORDS + f"?domain__id__exact={other_tenant.domain.pk}").content
    assert "globex" not in page.decode()


def test_knowledge_base_filter_labels_and_visibility(operator, tenant, two_orgs):
    faq = KnowledgeBaseFactory(domain=tenant.domain, name="faq")
    sales = KnowledgeBaseFactory(domain=DomainFactory(org=tenant.org, slug="sales"), name="crm")
    page = operator.get(RECORDS).content.decode()
    offered = filter_choices(page, "knowledge_base__id__exact")
    assert offered == [str(kb.pk) for kb in (sales, faq, two_orgs["handbook"])]
    assert "acme / support / handbook" in page
    assert "globex" not in page
    narrowed = operator.get(RECORDS + f"?domain__id__exact={tenant.domain.pk}").content.decode()
    assert filter_choices(narrowed, "knowledge_base__id__exact") == [
        str(kb.pk) for kb in (faq, two_orgs["handbook"])
    ]


def test_superuser_sees_every_orgs_namespaces(admin_client, two_orgs):
    offered = filter_choices(admin_client.get(RECORDS).content.decode(), "namespace")
    assert "user%3Aglobex-ceo" in offered


# --- 3. the retrieval playground -----------------------------------------------------------

PLAYGROUND = RECORDS + "playground/"


@pytest.fixture
def indexed(tenant, other_tenant):
    """Records written (and indexed) through the write service in both orgs."""
    from memoryhub.services import write

    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook")
    write.write(tenant.scope, [{"content": "refunds take five days"}], sources=["handbook"])
    write.write(
        tenant.scope,
        [{"content": "alice asked about refunds", "namespace": "user:alice"}],
        sources=["memory"],
    )
    knowledge_bases.ensure_knowledge_base(other_tenant.scope, "globex-vault")
    write.write(
        other_tenant.scope,
        [{"content": "globex refunds secret", "namespace": "user:globex-ceo"}],
        sources=["globex-vault"],
    )


def playground(client, tenant, **params: str) -> str:
    from urllib.parse import urlencode

    query = {"domain": tenant.domain.pk, "query": "refunds", "mode": "hybrid", "k": 5, **params}
    return client.get(PLAYGROUND + "?" + urlencode(query, doseq=True)).content.decode()


def test_playground_results_link_to_their_records(operator, tenant, indexed):
    page = playground(operator, tenant)
    record = MemoryRecord.unscoped.get(content="refunds take five days")
    assert f'href="{RECORDS}{record.pk}/change/"' in page


def test_playground_offers_the_domains_sources_and_namespaces(operator, tenant, indexed):
    for page in (operator.get(PLAYGROUND).content.decode(), playground(operator, tenant)):
        sources = re.search(r'<select name="sources".*?</select>', page, re.S)
        namespaces = re.search(r'<select name="namespaces".*?</select>', page, re.S)
        assert sources and namespaces
        assert re.findall(r'value="([^"]*)"', sources.group()) == ["handbook", "memory"]
        assert re.findall(r'value="([^"]*)"', namespaces.group()) == ["", "user:alice"]
        assert "globex" not in page


def test_playground_sources_and_namespaces_choices_filter_the_query(operator, tenant, indexed):
    handbook = playground(operator, tenant, sources=["handbook"])
    assert "refunds take five days" in handbook
    alice = playground(operator, tenant, namespaces=["user:alice"])
    assert "alice asked about refunds" in alice
    assert "refunds take five days" not in alice
    typed = playground(operator, tenant, other_namespaces="user:alice, user:bob")
    assert "alice asked about refunds" in typed
    refused = playground(operator, tenant, sources=["globex-vault"])
    assert "Select a valid choice" in refused
    assert "globex refunds secret" not in refused


def test_playground_explains_the_score(operator, tenant, indexed):
    page = playground(operator, tenant)
    assert 'id="playground-score-help"' in page
    assert "normalised over its candidates" in page and "vector weight" in page
    # Each result shows its rank and score in each leg.
    assert page.count('class="playground-leg-vector"') == page.count('class="playground-item"')
    assert "#1 · " in page


# --- 4. observations ----------------------------------------------------------------------

OBSERVATIONS = "/admin/memoryhub/observation/"


def observe(tenant, kind: str = "memory.write_refused", **fields):
    from memoryhub.models import Observation

    fields.setdefault("domain", tenant.domain)
    fields.setdefault("source", "handbook")
    fields.setdefault("count", 1)
    return Observation.unscoped.create(org=tenant.org, kind=kind, **fields)


def test_observation_summary_honours_the_list_filters(operator, tenant):
    from datetime import timedelta

    from django.utils import timezone

    observe(tenant, actor="key:bot", count=2)
    observe(tenant, actor="admin:alice", count=3)
    observe(tenant, actor="key:bot", count=5, created_at=timezone.now() - timedelta(days=10))
    everything = operator.get(OBSERVATIONS).content.decode()
    assert "write refused (10)" in everything
    by_actor = operator.get(OBSERVATIONS + "?actor=key%3Abot").content.decode()
    assert "write refused (7)" in by_actor
    this_week = operator.get(OBSERVATIONS + "?created_within=7d").content.decode()
    assert "write refused (5)" in this_week
    searched = operator.get(OBSERVATIONS + "?q=alice").content.decode()
    assert "write refused (3)" in searched


def test_observation_chart_has_axes_labels_and_a_legend(operator, tenant):
    from datetime import timedelta

    from django.utils import timezone
    from django.utils.formats import date_format

    observe(tenant, count=4)
    observe(tenant, kind="memory.deduplicated", count=1)
    page = operator.get(OBSERVATIONS).content.decode()
    today = timezone.localdate()
    assert re.search(r'id="chart-y-max"[^>]*>4</text>', page)
    assert re.search(r'id="chart-y-min"[^>]*>0</text>', page)
    shown = date_format(today, "DATE_FORMAT")  # the admin's one format
    assert re.search(rf'id="chart-x-end"[^>]*>{re.escape(shown)}</text>', page)
    start = date_format(today - timedelta(days=29), "DATE_FORMAT")
    assert re.search(rf'id="chart-x-start"[^>]*>{re.escape(start)}</text>', page)
    legend = re.search(r'<g id="chart-legend".*?</g>', page, re.S)
    assert legend and "write refused (4)" in legend.group()
    assert "deduplicated on write (1)" in legend.group()


def test_observation_actor_filter_offers_visible_actors_only(operator, tenant, other_tenant):
    observe(tenant, actor="admin:alice")
    observe(tenant, actor="key:bot")
    observe(tenant, actor="key:bot")
    observe(other_tenant, actor="admin:globex-boss")
    page = operator.get(OBSERVATIONS).content.decode()
    assert filter_choices(page, "actor") == ["key%3Abot", "admin%3Aalice"]
    assert "globex" not in page


def test_observation_actor_filter_is_bounded_and_follows_the_domain_filter(operator, tenant):
    for n in range(25):
        observe(tenant, actor=f"key:bot-{n:02d}")
    sales = DomainFactory(org=tenant.org, slug="sales")
    observe(tenant, domain=sales, actor="admin:sales-lead")
    offered = filter_choices(operator.get(OBSERVATIONS).content.decode(), "actor")
    assert len(offered) == 20
    narrowed = operator.get(OBSERVATIONS + f"?domain__id__exact={sales.pk}").content.decode()
    assert filter_choices(narrowed, "actor") == ["admin%3Asales-lead"]


def test_observation_created_within_filter(operator, tenant):
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    for age, source in ((timedelta(hours=2), "fresh"), (timedelta(days=3), "recent")):
        observe(tenant, kind="memory.written", source=source, created_at=now - age)
    observe(tenant, kind="memory.written", source="old", created_at=now - timedelta(days=20))
    observe(tenant, kind="memory.written", source="ancient", created_at=now - timedelta(days=40))

    def sources(query: str) -> set[str]:
        page = operator.get(OBSERVATIONS + query).content.decode()
        return set(re.findall(r'<td class="field-source">([^<]*)</td>', page))

    assert sources("?created_within=24h") == {"fresh"}
    assert sources("?created_within=7d") == {"fresh", "recent"}
    assert sources("?created_within=30d") == {"fresh", "recent", "old"}
    assert sources("") == {"fresh", "recent", "old", "ancient"}


# --- 5. boolean columns that read naturally -------------------------------------------------

KEYS = "/admin/tenants/apikey/"


@pytest.fixture
def keys(tenant, other_tenant):
    from datetime import timedelta

    from django.utils import timezone

    from tests.factories import create_api_key

    yesterday = timezone.now() - timedelta(days=1)
    return {
        "live": create_api_key(org=tenant.org, name="live-key")[0],
        "revoked": create_api_key(org=tenant.org, name="revoked-key", revoked=True)[0],
        "expired": create_api_key(org=tenant.org, name="expired-key", expiry_date=yesterday)[0],
        "foreign": create_api_key(org=other_tenant.org, name="globex-key")[0],
    }


def key_rows(page: str) -> dict[str, str]:
    """Each listed key's name and its "active" cell's icon (yes/no)."""
    rows = re.findall(r"<tr>.*?</tr>", page, re.S)
    found = {}
    for row in rows:
        name = re.search(r'<td class="field-name_and_scope">([^<]*)<', row)
        active = re.search(r'<td class="field-is_active"><img src="[^"]*icon-(yes|no)', row)
        if name and active:
            found[name.group(1)] = active.group(1)
    return found


def test_api_key_list_shows_active_not_revoked(tenant, keys, client):
    owner = MembershipFactory(org=tenant.org, role="owner", user__is_staff=True).user
    client.force_login(owner)
    page = client.get(KEYS).content.decode()
    assert "column-is_active" in page and "column-revoked" not in page
    assert key_rows(page) == {"live-key": "yes", "revoked-key": "no", "expired-key": "no"}
    assert "globex" not in page


@pytest.mark.parametrize(
    ("state", "names"),
    [
        ("active", {"live-key", "globex-key"}),
        ("revoked", {"revoked-key"}),
        ("expired", {"expired-key"}),
    ],
)
def test_api_key_state_filter(admin_client, keys, state, names):
    page = admin_client.get(KEYS + f"?state={state}").content.decode()
    assert set(key_rows(page)) == names


def test_playground_filters_by_time_and_shows_context_turns(operator, tenant, other_tenant):
    from memoryhub.services import write

    turns = [
        ("user:bo", "s1", "2024-03-01T10:00:00+00:00", "Bo: hello there"),
        ("user:bo", "s1", "2024-03-01T10:01:00+00:00", "Bo: my refunds never arrived"),
        ("user:bo", "s1", "2024-03-01T10:02:00+00:00", "Agent: I will check that"),
        ("user:bo", "s2", "2024-06-01T10:00:00+00:00", "Bo: refunds again, sorry"),
    ]
    write.write(
        tenant.scope,
        [
            {"content": c, "namespace": ns, "metadata": {"session": s}, "occurred_at": at}
            for ns, s, at, c in turns
        ],
    )
    write.write(other_tenant.scope, [{"content": "Eve: refunds", "metadata": {"session": "s1"}}])
    page = playground(
        operator,
        tenant,
        other_namespaces="user:bo",
        occurred_before="2024-04-01",
        context_turns="1",
    )
    assert "my refunds never arrived" in page
    assert "refunds again" not in page  # occurred after the window
    assert page.count('class="playground-turn"') == 2  # its previous and next turn
    assert "Bo: hello there" in page and "I will check that" in page
    assert "Eve" not in page
    bad = playground(operator, tenant, occurred_before="next tuesday")
    assert "occurred_before" in bad and "playground-item" not in bad
