"""Word statistics of large domains: the keyword leg of a domain whose words are counted
ranks the records holding a query's rarest words instead of every record holding any of
them; every door keeps the promises: counts per tenant, never another org's, gone with
every erasure in the domain, k answers when any record matches."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.cache import cache
from django.db import connection

from memoryhub.models import WordFrequency, WordStatistics
from memoryhub.scope import Scope, tenant_scope
from memoryhub.services import query, vector_indexes, word_statistics, write
from memoryhub.services.forget import ForgetRequest, forget
from memoryhub.services.query import WORDS, keyword_words
from tests.cluster import ONE_SERVERS_PLAN, single_node

pytestmark = pytest.mark.django_db

#: Large enough for word statistics in these tests.
LARGE = {"KEYWORD_STATISTICS_MIN_RECORDS": 50, "KEYWORD_RANK_BUDGET": 1}


@pytest.fixture
def few_common_records(monkeypatch):
    """Counts kept of words at least two records hold; an uncounted word counts as one."""
    monkeypatch.setattr(word_statistics, "COMMON_WORD_RECORDS", 2)
    monkeypatch.setattr(word_statistics, "RARE_WORD_RECORDS", 1)


def sweep() -> list[str]:
    return vector_indexes.ensure_tenant_indexes(settle_after=timedelta(0)).words


def counts(scope: Scope) -> dict[str, int]:
    with tenant_scope(scope):
        return dict(WordFrequency.objects.values_list("lexeme", "records"))


def fresh(scope: Scope, text: str, **kwargs) -> query.QueryResult:
    cache.clear()
    query.clear_plans()
    return query.query(scope, query=text, **kwargs)


def load(committed, scope: Scope, org: str, common: int, rare: int) -> None:
    """``common`` records saying "refund" three times, ``rare`` saying "zebra" once."""
    items = [{"content": f"{org} refund refund refund note {n}."} for n in range(common)]
    items += [{"content": f"{org} zebra desk {n}."} for n in range(rare)]
    for start in range(0, len(items), 100):
        committed(write.write, scope, items[start : start + 100])


def test_the_sweeper_counts_the_words_of_large_domains_only(
    tenant, other_tenant, committed, settings, few_common_records
):
    settings.MEMORYHUB = LARGE
    load(committed, tenant.scope, "Acme", 60, 3)
    load(committed, other_tenant.scope, "Globex", 20, 3)  # under the minimum
    assert sweep() == [f"{tenant.scope.org_id}/{tenant.scope.domain_id}"]
    mine = counts(tenant.scope)
    assert mine["refund"] == 60 and mine["zebra"] == 3 and mine["acm"] == 63
    assert counts(other_tenant.scope) == {}
    with tenant_scope(tenant.scope):
        assert WordStatistics.objects.get().records == 63
    assert sweep() == []  # nothing changed: not counted again
    # Grown by a tenth: counted again.
    load(committed, tenant.scope, "Acme, later,", 7, 0)
    assert sweep() == [f"{tenant.scope.org_id}/{tenant.scope.domain_id}"]
    assert counts(tenant.scope)["refund"] == 67
    # Under half the minimum: the statistics go.
    settings.MEMORYHUB = {**LARGE, "KEYWORD_STATISTICS_MIN_RECORDS": 200}
    assert sweep() == []
    assert counts(tenant.scope) == {}
    assert not word_statistics.applies(tenant.scope)


def test_rare_words_are_never_stored(tenant, committed, settings):
    settings.MEMORYHUB = LARGE
    load(committed, tenant.scope, "Acme", 60, word_statistics.COMMON_WORD_RECORDS - 1)
    sweep()
    assert "zebra" not in counts(tenant.scope)
    assert counts(tenant.scope)["refund"] == 60


def test_a_large_domains_keyword_leg_ranks_the_records_holding_the_rarest_words(
    tenant, other_tenant, committed, settings, few_common_records
):
    # A hundred records say "refund" three times, twenty say "zebra" once. ts_rank has
    # no idea which word is rare: ranking every match puts "refund" first. With the
    # domain's counts, the rarest word's records are the ones ranked (k=3: a depth of
    # 16 and a budget of 80 records).
    settings.MEMORYHUB = LARGE
    load(committed, tenant.scope, "Acme", 100, 20)
    load(committed, other_tenant.scope, "Globex", 100, 20)
    before = query.query(tenant.scope, query="zebra refund", k=3, mode="keyword").items
    assert "refund" in before[0].content
    committed(sweep)  # counts both domains; their plans see it (the generation moves on)
    for scope, org in ((tenant.scope, "Acme"), (other_tenant.scope, "Globex")):
        items = query.query(scope, query="zebra refund", k=3, mode="keyword").items
        assert [item.content.split()[:2] for item in items] == [[org, "zebra"]] * 3
        hybrid = query.query(scope, query="zebra refund", k=10, mode="hybrid").items
        assert len(hybrid) == 10 and all(item.content.startswith(org) for item in hybrid)
    # Below the minimum (the other org's domain once its counts go), every match ranks.
    settings.MEMORYHUB = {**LARGE, "KEYWORD_STATISTICS_MIN_RECORDS": 250}
    committed(sweep)
    assert word_statistics.applies(tenant.scope) is False
    again = query.query(tenant.scope, query="zebra refund", k=3, mode="keyword").items
    assert "refund" in again[0].content


def test_the_leg_ranks_within_the_budget(tenant, committed, settings, few_common_records):
    settings.MEMORYHUB = LARGE
    load(committed, tenant.scope, "Acme", 60, 15)
    sweep()
    plan = query.plan_for(tenant.scope, query.QueryRequest.build(query="x", k=1, mode="keyword"))
    assert plan.keyword is not None and plan.every_keyword is not None
    ranked = run_leg(plan.keyword, "zebra refund")
    # k=1: a depth of 12; the fifteen "zebra" records are enough, "refund" is not read.
    assert len(ranked) == 12 and all("zebra" in row[2] for row in ranked)


def run_leg(leg, text: str) -> list[tuple]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(leg.sql, leg.bind({WORDS: keyword_words(text)}))
        return cursor.fetchall()


def ranked_rows(leg, text: str) -> int:
    """How many records ``leg`` ranked for ``text`` (the rows its sort read)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + leg.sql, leg.bind({WORDS: keyword_words(text)})
        )
        plan = cursor.fetchone()[0]
    plan = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    while plan["Node Type"] != "Sort":
        plan = plan["Plans"][0]
    return plan["Plans"][0]["Actual Rows"]


@pytest.fixture
def no_more_than_the_budget(monkeypatch):
    """A large domain's keyword leg ranks at most its budget of records."""
    monkeypatch.setattr(word_statistics, "RANKED_PER_BUDGET", 1)


def write_pairs(
    committed, scope: Scope, org: str, *, refunds: int, invoices: int, memos: int, repeat: int
) -> None:
    """``refunds`` records saying "refund" ``repeat`` times, ``invoices`` saying "invoice"
    as often, 5 saying both once ("pair"), ``memos`` saying "invoice memo"."""
    items = [{"content": f"{org}{' refund' * repeat} {n}."} for n in range(refunds)]
    items += [{"content": f"{org}{' invoice' * repeat} {n}."} for n in range(invoices)]
    items += [{"content": f"{org} refund invoice pair {n}."} for n in range(5)]
    items += [{"content": f"{org} invoice memo {n}."} for n in range(memos)]
    for start in range(0, len(items), 100):
        committed(write.write, scope, items[start : start + 100])


def test_a_query_of_common_words_ranks_the_records_holding_all_of_its_rarest_words(
    tenant, other_tenant, committed, settings, few_common_records, no_more_than_the_budget
):
    # k=1: a depth of 12 and a budget of 60 records. "refund" and "invoice" are each in
    # 105 of 205 records, so no word of "refund invoice" is rare: the leg ranks the
    # records holding both (105 expected to hold the first, still over 60, so the
    # second too; the GIN index finds the 5 that hold both), not 60 holding either.
    settings.MEMORYHUB = LARGE
    for scope, org in ((tenant.scope, "Acme"), (other_tenant.scope, "Globex")):
        write_pairs(committed, scope, org, refunds=100, invoices=60, memos=40, repeat=3)
    sweep()
    assert counts(tenant.scope)["refund"] == 105 and counts(tenant.scope)["invoic"] == 105
    for scope, org in ((tenant.scope, "Acme"), (other_tenant.scope, "Globex")):
        plan = query.plan_for(scope, query.QueryRequest.build(query="x", k=1, mode="keyword"))
        rows = run_leg(plan.keyword, "refund invoice")
        assert sorted(row[2] for row in rows) == [
            f"{org} refund invoice pair {n}." for n in range(5)
        ]
        # Fewer than k? No: the service ranks them first, from this org only.
        items = fresh(scope, "refund invoice", k=5, mode="keyword").items
        assert {item.content for item in items} == {
            f"{org} refund invoice pair {n}." for n in range(5)
        }


def test_the_records_holding_every_common_word_stay_when_too_few_to_fill_k(
    tenant, other_tenant, committed, settings, few_common_records, no_more_than_the_budget
):
    # k=8: a depth of 26 and a budget of 130. "refund" and "invoice" are each in 305 of
    # 605 records: the first leg ranks the 5 holding both, fewer than k; the records
    # holding any word fill k, but only the first 130 the index finds are ranked (the
    # first written, "refund" alone). The 5 stay in the answer, ranked as before.
    settings.MEMORYHUB = LARGE
    for scope, org in ((tenant.scope, "Acme"), (other_tenant.scope, "Globex")):
        write_pairs(committed, scope, org, refunds=300, invoices=300, memos=0, repeat=2)
    sweep()
    for scope, org in ((tenant.scope, "Acme"), (other_tenant.scope, "Globex")):
        found = [item.content for item in fresh(scope, "refund invoice", k=8, mode="keyword").items]
        assert len(found) == 8 and all(content.startswith(org) for content in found)
        assert {f"{org} refund invoice pair {n}." for n in range(5)} <= set(found)


@single_node(ONE_SERVERS_PLAN)
@pytest.mark.parametrize("leg", ["keyword", "every_keyword"])
def test_a_large_domains_keyword_leg_ranks_a_bounded_number_of_records(
    tenant, committed, settings, few_common_records, no_more_than_the_budget, leg
):
    # One common word held by 100 records (a single-word question, or the OR over every
    # match): the leg ranks 60 of them (the budget), not all 100, and still returns k.
    settings.MEMORYHUB = LARGE
    load(committed, tenant.scope, "Acme", 100, 0)
    sweep()
    plan = query.plan_for(tenant.scope, query.QueryRequest.build(query="x", k=1, mode="keyword"))
    chosen = getattr(plan, leg)
    assert ranked_rows(chosen, "refund") == 60  # word_statistics.ranked_at_most(12)
    assert len(run_leg(chosen, "refund")) == 12
    assert len(fresh(tenant.scope, "refund", k=1, mode="keyword").items) == 1
    # A domain without word statistics ranks every match (it is small).
    settings.MEMORYHUB = {**LARGE, "KEYWORD_STATISTICS_MIN_RECORDS": 250}
    committed(sweep)
    plan = query.plan_for(tenant.scope, query.QueryRequest.build(query="x", k=1, mode="keyword"))
    assert plan.every_keyword is None and ranked_rows(plan.keyword, "refund") == 100


def test_too_few_records_holding_the_rarest_words_still_give_k(
    tenant, committed, settings, monkeypatch
):
    # "zebra" is in one record, but uncounted words are taken to be in twenty: the first
    # leg finds one record; the second (every match) fills k.
    monkeypatch.setattr(word_statistics, "COMMON_WORD_RECORDS", 2)
    monkeypatch.setattr(word_statistics, "RARE_WORD_RECORDS", 20)
    settings.MEMORYHUB = LARGE
    committed(write.write, tenant.scope, [{"content": f"Acme refund note {n}."} for n in range(99)])
    committed(write.write, tenant.scope, [{"content": "A zebra."}])
    sweep()
    for mode in ("keyword", "hybrid"):
        items = fresh(tenant.scope, "zebra refund", k=3, mode=mode).items
        assert len(items) == 3, mode
        assert items[0].content == "A zebra.", mode


def test_a_common_word_past_the_budget_is_not_taken_when_its_records_would_be_cut(
    tenant, other_tenant, committed, settings, few_common_records, no_more_than_the_budget
):
    # k=1: a depth of 12, a budget of 60, and at most 60 records ranked. "zebra" is in one
    # record, "refund" in 101. Taking "refund" too (the rarest words hold fewer records
    # than the depth) would make the leg match 101 records and rank the first 60 the
    # index finds: the one holding both words, written last, would be cut, while ranking
    # every match puts it first.
    settings.MEMORYHUB = LARGE
    for scope, org in ((tenant.scope, "Acme"), (other_tenant.scope, "Globex")):
        load(committed, scope, org, 100, 0)
        committed(write.write, scope, [{"content": f"{org} zebra refund desk."}])
    sweep()
    for scope, org in ((tenant.scope, "Acme"), (other_tenant.scope, "Globex")):
        items = fresh(scope, "zebra refund", k=1, mode="keyword").items
        assert [item.content for item in items] == [f"{org} zebra refund desk."]
        # As ranking every match answers (no statistics).
        word_statistics.forget(scope)
        items = fresh(scope, "zebra refund", k=1, mode="keyword").items
        assert [item.content for item in items] == [f"{org} zebra refund desk."]


@pytest.mark.parametrize(
    "text", ["O'Brien's refund", "refund \\ back\\slash", "'quoted' & refund | !x", "a:b c:d"]
)
def test_the_rarest_words_are_quoted(tenant, committed, settings, few_common_records, text):
    settings.MEMORYHUB = LARGE
    committed(
        write.write,
        tenant.scope,
        [{"content": f"{text} {text}"}] + [{"content": f"refund memo {n}"} for n in range(60)],
    )
    sweep()
    assert word_statistics.applies(tenant.scope)
    for mode in ("keyword", "hybrid"):
        items = fresh(tenant.scope, text, k=2, mode=mode).items
        assert items and items[0].content == f"{text} {text}", mode


def test_a_question_of_hundreds_of_rare_words_is_answered(
    tenant, committed, settings, few_common_records
):
    # One token of 300 parts is 300 lexemes, each uncounted (rare): the chance that a
    # record holds them all is a product far below a float's range. It is summed as
    # logarithms, so the question is answered instead of failing with an underflow.
    settings.MEMORYHUB = LARGE
    load(committed, tenant.scope, "Acme", 60, 0)
    sweep()
    token = "_".join(f"zq{n}" for n in range(300))
    committed(write.write, tenant.scope, [{"content": f"refund {token}"}])
    items = fresh(tenant.scope, f"refund {token}", k=2, mode="keyword").items
    assert items[0].content == f"refund {token}" and len(items) == 2


def test_an_erasure_takes_its_domains_counts_with_it(
    tenant, other_tenant, committed, settings, few_common_records
):
    settings.MEMORYHUB = LARGE
    for scope in (tenant.scope, other_tenant.scope):
        committed(
            write.write,
            scope,
            [{"content": f"refund note {n}."} for n in range(60)]
            + [
                {"content": f"Zoltan asked about parcel {n}.", "namespace": "user:zoltan"}
                for n in range(5)
            ],
        )
    sweep()
    assert counts(tenant.scope)["zoltan"] == 5
    committed(forget, tenant.scope, ForgetRequest(namespace="user:zoltan"))
    assert counts(tenant.scope) == {}
    assert not word_statistics.applies(tenant.scope)
    assert counts(other_tenant.scope)["zoltan"] == 5  # another org's erasure: not this one
    # Counted again from what remains: the erased subject's words are not among them.
    sweep()
    assert "zoltan" not in counts(tenant.scope) and counts(tenant.scope)["refund"] == 60
    assert word_statistics.applies(tenant.scope)


def test_an_org_or_domain_deleted_takes_its_counts_with_it(
    tenant, committed, settings, few_common_records
):
    settings.MEMORYHUB = LARGE
    load(committed, tenant.scope, "Acme", 60, 3)
    sweep()
    domain_id = tenant.scope.domain_id
    assert WordFrequency.unscoped.filter(domain_id=domain_id).exists()
    tenant.domain.delete()
    assert not WordFrequency.unscoped.filter(domain_id=domain_id).exists()
    assert not WordStatistics.unscoped.filter(domain_id=domain_id).exists()


@pytest.mark.parametrize("step", ["count", "forget"])
def test_a_count_waits_for_an_erasure_that_holds_the_domains_lock(tenant, other_tenant, step):
    # An erasure deletes the counts and holds the domain's word-statistics lock until it
    # commits; a count (or another deletion) in the same domain waits for it, so it
    # cannot store the erased records' words afterwards. Another org's domain does not.
    from django.db import OperationalError, connection

    from tests.programs import second_connection

    with second_connection() as erasure:
        erasure.execute(
            "SELECT pg_advisory_xact_lock(%s, %s)",
            [word_statistics.WORDS_LOCK_CLASS, tenant.scope.domain_id],
        )
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '200ms'")
        run = {"count": word_statistics.count, "forget": word_statistics.forget}[step]
        with pytest.raises(OperationalError, match="lock timeout"):
            run(tenant.scope)
        run(other_tenant.scope)  # another domain: no wait
        erasure.rollback()
    run(tenant.scope)  # the erasure ended: it goes through


@single_node(ONE_SERVERS_PLAN)
def test_the_rarest_words_match_is_written_twice_only_in_a_domain_holding_much_of_the_table(
    tenant, other_tenant, committed, settings, few_common_records
):
    # Twice, the planner scans the GIN index alone: right for a domain holding much of
    # the table, wrong for a small one, whose index matches are mostly other tenants'.
    # 103 of 123 records are Acme's, 20 Globex's: both counted, Globex's share is 16%.
    settings.MEMORYHUB = {**LARGE, "KEYWORD_STATISTICS_MIN_RECORDS": 20}
    load(committed, tenant.scope, "Acme", 100, 3)
    load(committed, other_tenant.scope, "Globex", 17, 3)
    assert len(sweep()) == 2
    # Without full-text indexes of their own (see the next test): as if their builds failed.
    word_statistics.ensure_keyword_indexes({}, concurrently=False)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memoryhub_memoryrecord")
    query.clear_plans()

    def rarest_matches(scope: Scope) -> int:
        plan = query.plan_for(scope, query.QueryRequest.build(query="x", k=1, mode="keyword"))
        assert plan.keyword is not None
        return plan.keyword.sql.count("memoryhub_wordfrequency")

    assert rarest_matches(tenant.scope) == 2
    assert rarest_matches(other_tenant.scope) == 1
    # Either way, the same records: each domain's own.
    for scope, org in ((tenant.scope, "Acme"), (other_tenant.scope, "Globex")):
        plan = query.plan_for(scope, query.QueryRequest.build(query="x", k=3, mode="keyword"))
        rows = run_leg(plan.keyword, "zebra refund")
        assert rows and all(row[2].startswith(org) for row in rows)


def test_a_large_domain_gets_a_full_text_index_of_its_own(
    tenant, other_tenant, committed, settings, few_common_records
):
    # The shared GIN index finds every tenant's records holding a word (for a question
    # in one domain, mostly other tenants'); a large domain's own finds its records
    # only, and the planner picks it. Globex is too small.
    from django.core.management import call_command

    settings.MEMORYHUB = LARGE
    load(committed, tenant.scope, "Acme", 60, 3)
    load(committed, other_tenant.scope, "Globex", 20, 3)
    mine = word_statistics.keyword_index_name(tenant.scope.org_id, tenant.scope.domain_id)
    out = StringIO()
    call_command("memoryhub_ensure_indexes", stdout=out)
    assert f"Domain full-text index {mine}: created." in out.getvalue()
    assert word_statistics.has_keyword_index(tenant.scope)
    assert not word_statistics.has_keyword_index(other_tenant.scope)
    assert vector_indexes.ensure_tenant_indexes(settle_after=timedelta(0)).keyword_created == []
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memoryhub_memoryrecord")
        cursor.execute("SET LOCAL enable_seqscan = off")
    query.clear_plans()
    plan = query.plan_for(tenant.scope, query.QueryRequest.build(query="x", k=3, mode="keyword"))
    assert plan.keyword is not None
    # Its matches need no tenant bitmap, and are not written twice to avoid one.
    assert plan.keyword.sql.count("memoryhub_wordfrequency") == 1
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN " + plan.keyword.sql, plan.keyword.bind({WORDS: keyword_words("zebra")})
        )
        explained = "\n".join(row[0] for row in cursor.fetchall())
    assert mine in explained and "memoryhub_record_fts_idx" not in explained
    rows = run_leg(plan.keyword, "zebra desk")
    assert len(rows) == 3 and all(row[2].startswith("Acme zebra") for row in rows)
    # Through the service: Acme's records only, in each org.
    for scope, org in ((tenant.scope, "Acme"), (other_tenant.scope, "Globex")):
        found = fresh(scope, "zebra desk", k=5, mode="keyword").items
        assert len(found) == 3 and all(item.content.startswith(org) for item in found)
    # An erasure in the domain keeps it (the vacuum after it cleans every index).
    committed(forget, tenant.scope, ForgetRequest(namespace="user:nobody"))
    assert word_statistics.has_keyword_index(tenant.scope)
    # Under half the minimum: dropped.
    settings.MEMORYHUB = {**LARGE, "KEYWORD_STATISTICS_MIN_RECORDS": 200}
    assert vector_indexes.ensure_tenant_indexes(settle_after=timedelta(0)).keyword_dropped == [mine]
    assert not word_statistics.has_keyword_index(tenant.scope)


def test_a_full_text_index_left_invalid_is_built_again(tenant, committed, settings):
    settings.MEMORYHUB = LARGE
    load(committed, tenant.scope, "Acme", 60, 0)
    sweep()
    mine = word_statistics.keyword_index_name(tenant.scope.org_id, tenant.scope.domain_id)
    with connection.cursor() as cursor:
        # What a failed CREATE INDEX CONCURRENTLY leaves.
        cursor.execute(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass", [mine]
        )
    assert not word_statistics.has_keyword_index(tenant.scope)
    changes = vector_indexes.ensure_tenant_indexes(settle_after=timedelta(0))
    assert (changes.keyword_dropped, changes.keyword_created) == ([mine], [mine])
    assert word_statistics.has_keyword_index(tenant.scope)


def test_a_large_domains_rarest_words_include_the_words_of_dotted_names(
    tenant, committed, settings, few_common_records
):
    # A record whose rarest word sits inside a dotted name ("enum.IntEnum", one token
    # "enum.intenum" to PostgreSQL's parser) must hold "intenum" as a word too: the
    # rarest words' leg ranks only the records holding it.
    settings.MEMORYHUB = LARGE
    load(committed, tenant.scope, "Acme", 100, 0)
    target = "Acme flags subclass enum.IntEnum in the refund note."
    committed(write.write, tenant.scope, [{"content": target}])
    committed(sweep)
    assert word_statistics.applies(tenant.scope)
    assert counts(tenant.scope)["refund"] == 101
    items = fresh(tenant.scope, "refund note intenum", k=3, mode="keyword").items
    assert items[0].content == target
