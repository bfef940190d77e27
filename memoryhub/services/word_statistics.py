"""Word statistics of large domains: how many records hold each common word, so that a
query's keyword leg ranks the records holding its rarest words instead of every record
holding any of its words.

The keyword leg matches a query's words with an OR and ranks the matches by
``ts_rank``. In a small domain that is cheap; in a large one a query's common words
match most of its records, and reading and ranking every match costs time in proportion
to the domain. Ranking only the records that hold the query's rarest words (every word
fewer than :data:`COMMON_WORD_RECORDS` records hold, then its commoner words, rarest
first, while the records they hold stay within ``KEYWORD_RANK_BUDGET``) reads a bounded
number of rows and keeps the records the rare words tell apart, so recall does not
suffer. The candidates are still ranked by the whole query: the statistics choose
which records are ranked, never their order, and a record matching none of the query's
words is never one of them. When every word of a query is common, the records holding
all of its rarest words are ranked (an AND, :func:`rarest_words_sql`), and no leg ranks
more than :func:`ranked_at_most` records: otherwise a single common word would have the
leg rank a large share of a large domain.

The words are counted per domain (PostgreSQL's ``ts_stat`` over its search vectors) by
the sweeper's maintenance run, for domains of at least
``KEYWORD_STATISTICS_MIN_RECORDS`` records, again once a domain has grown or shrunk by
a tenth; only words at least :data:`COMMON_WORD_RECORDS` records hold are kept (a word
missing counts as rare). Every erasure in a domain deletes its counts (the sweeper
counts them again from what remains): no word of an erased record outlives its erasure.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from django.db import connection, transaction
from psycopg import sql

from ..cache import bump_generation_on_commit
from ..conf import memoryhub_settings
from ..models import SEARCH_CONFIG, MemoryRecord, WordFrequency, WordStatistics
from ..scope import Scope
from . import record_indexes
from .store.locks import int4_key

logger = logging.getLogger(__name__)

#: Words fewer records hold are not stored (they count as rare: their records are
#: always ranked).
COMMON_WORD_RECORDS = 20
#: What a word no count is kept of is taken to hold, choosing a query's words.
RARE_WORD_RECORDS = COMMON_WORD_RECORDS // 2
#: A domain's words are counted again once it has grown or shrunk by this share.
RECOUNT_SHARE = 0.1


def applies(scope: Scope) -> bool:
    """Whether ``scope``'s domain has word statistics (its keyword leg uses them)."""
    return WordStatistics.unscoped.filter(org_id=scope.org_id, domain_id=scope.domain_id).exists()


def share(scope: Scope) -> float:
    """About what share of the records table ``scope``'s domain holds: the records its
    statistics counted over the planner's row count (1.0 when either is unknown)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT s.records, c.reltuples FROM {WordStatistics._meta.db_table} s, pg_class c"
            " WHERE s.org_id = %s AND s.domain_id = %s AND c.oid = %s::regclass",
            [scope.org_id, scope.domain_id, MemoryRecord._meta.db_table],
        )
        row = cursor.fetchone()
    if row is None or row[1] <= 0:
        return 1.0
    return min(row[0] / row[1], 1.0)


def rarest_words_sql(
    scope: Scope, words: Any, budget: int, depth: int, limit: int
) -> tuple[str, list[Any]]:
    """SQL of a tsquery choosing the records ``scope``'s domain's keyword leg ranks.

    ``words`` is the query's raw tsquery OR (as the keyword leg builds it). Its lexemes
    are taken rarest first (a word no count is kept of counts as held by
    :data:`RARE_WORD_RECORDS` records):

    - when its rarest word is held by at most ``limit`` records: an OR of its words
      while the records they hold add up to at most ``budget``, and past it while they
      add up to fewer than ``depth`` (what the ranking needs) and the next word keeps
      them within ``limit``: a common word that would take them past it would have the
      leg rank the first ``limit`` records the index finds, and cut those holding the
      rarer words as often as not (the leg then comes back short, and every match is
      ranked, when the rarer words hold fewer than k);
    - when even its rarest word is held by more (every word of the query is common): an
      AND of its words, rarest first, until the records holding all of them are
      expected to be at most ``budget`` (the words taken as independent: the domain's
      shares of records holding each, multiplied). The GIN index intersects their
      lists, and a record holding every word of the question is among them.

    Either way the keyword leg ranks at most ``limit`` of the records it chooses
    (:func:`ranked_at_most`): a single common word, or common words that go together, cannot
    make it rank a large domain.

    NULL (matching nothing) when the query has no words.
    """
    frequencies, statistics = WordFrequency._meta.db_table, WordStatistics._meta.db_table
    # Each lexeme quoted as a tsquery operand: backslashes and quotes escaped.
    quoted = "'''' || replace(replace(w.lexeme, chr(92), chr(92) || chr(92)), '''', '''''') || ''''"
    rarest_first = "ORDER BY c.records, c.lexeme"
    sql = (
        "(SELECT (CASE WHEN min(w.records) > %s"
        f" THEN string_agg({quoted}, ' & ') FILTER (WHERE w.log_expected_before > ln(%s))"
        f" ELSE string_agg({quoted}, ' | ')"
        " FILTER (WHERE w.running <= %s OR (w.running - w.records < %s AND w.running <= %s))"
        " END)::tsquery"
        " FROM (SELECT c.lexeme, c.records,"
        f" sum(c.records) OVER ({rarest_first}) AS running,"
        # How many records are expected to hold every word rarer than this one, as a
        # logarithm (a product of many small shares underflows).
        " ln(n.records) + COALESCE(sum(ln(least(c.records, n.records)::float8 / n.records))"
        f" OVER ({rarest_first} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)"
        " AS log_expected_before"
        # A join, not a subquery per lexeme: the planner would copy that subquery into
        # each of the three expressions reading ``records`` (three lookups per word).
        " FROM (SELECT t.lexeme, COALESCE(f.records, %s) AS records"
        " FROM unnest(tsvector_to_array(to_tsvector(%s::regconfig, %s))) AS t(lexeme)"
        f" LEFT JOIN {frequencies} f"
        " ON f.domain_id = %s AND f.org_id = %s AND f.lexeme = t.lexeme) c,"
        f" (SELECT greatest(s.records, 1) AS records FROM {statistics} s"
        " WHERE s.domain_id = %s AND s.org_id = %s) n"
        ") w)"
    )
    chosen = [int(limit), float(budget), int(budget), int(depth), int(limit)]
    held = [RARE_WORD_RECORDS, SEARCH_CONFIG, words, scope.domain_id, scope.org_id]
    return sql, [*chosen, *held, scope.domain_id, scope.org_id]


#: A domain holding at least this share of the records table has the rarest words' match
#: written twice (:func:`rarest_words_match`): that helps a domain that is much of the
#: table and costs a small one, whose index matches are mostly other tenants'; the
#: share between them is where neither way clearly wins.
DOUBLE_MATCH_MIN_SHARE = 0.2


def rarest_words_match(
    scope: Scope, column: str, words: Any, budget: int, depth: int, limit: int
) -> tuple[str, list[Any]]:
    """SQL of ``column`` (a search vector) matching the tsquery of
    :func:`rarest_words_sql`, as the keyword leg of ``scope``'s domain writes it.

    In a domain holding at least :data:`DOUBLE_MATCH_MIN_SHARE` of the table the match
    is written twice on purpose: the search vector has no planner statistics (it holds
    personal data), so one match is estimated at 0.5% of the table, and the planner ANDs
    the GIN index's few matches with a bitmap of every row of the tenant. Two are
    estimated at 0.005² and the GIN index is scanned alone. In a smaller domain most of
    the index's matches are other tenants' records, and the tenant's bitmap is what
    keeps them out: there the match is written once. So it is in a domain with a
    full-text index of its own (:func:`ensure_keyword_indexes`), which holds no other
    tenant's records and needs no bitmap beside it.
    """
    rarest, params = rarest_words_sql(scope, words, budget, depth, limit)
    match = f"{column} @@ {rarest}"
    if not has_keyword_index(scope) and share(scope) >= DOUBLE_MATCH_MIN_SHARE:
        return f"{match} AND {match}", [*params, *params]
    return match, params


# --- the keyword indexes of large domains ----------------------------------------------------

#: A domain's own full-text index: ``memoryhub_tfts_<org>_<domain>``.
KEYWORD_INDEX_PREFIX = "memoryhub_tfts_"
_KEYWORD_INDEX_NAME = re.compile(r"^memoryhub_tfts_(\d+)_(\d+)$")


def keyword_index_name(org_id: int, domain_id: int) -> str:
    return f"{KEYWORD_INDEX_PREFIX}{int(org_id)}_{int(domain_id)}"


def has_keyword_index(scope: Scope) -> bool:
    """Whether ``scope``'s domain has its own (valid) full-text index."""
    return record_indexes.is_valid(keyword_index_name(scope.org_id, scope.domain_id))


def _keyword_indexes() -> dict[tuple[int, int], tuple[str, bool]]:
    """Every domain's own full-text index: (org, domain) -> (name, valid)."""
    found = {}
    for name, valid in record_indexes.named(_KEYWORD_INDEX_NAME).items():
        match = _KEYWORD_INDEX_NAME.match(name)
        assert match is not None
        found[(int(match[1]), int(match[2]))] = (name, valid)
    return found


def ensure_keyword_indexes(
    sizes: dict[tuple[int, int], int], *, concurrently: bool
) -> tuple[list[str], list[str]]:
    """Give every domain with word statistics' size (``KEYWORD_STATISTICS_MIN_RECORDS``
    records) a full-text index of its own records (a partial GIN index on the search
    vector), and drop those of domains under half of it, gone, or left invalid by a
    failed ``CONCURRENTLY`` build. Returns the names created and dropped.

    The shared GIN index holds every tenant's records: most of what it finds for a
    question in one domain can be other tenants' records, each a heap block read and
    thrown away. A domain's own index finds its
    records only (the planner picks it: the query names the domain, as the predicate
    does)."""
    minimum = int(memoryhub_settings.KEYWORD_STATISTICS_MIN_RECORDS)
    existing = _keyword_indexes()
    created: list[str] = []
    dropped: list[str] = []
    for tenant, (name, valid) in existing.items():
        size = sizes.get(tenant, 0)
        if minimum == 0 or size < minimum // 2 or not valid:
            record_indexes.drop(name, concurrently=concurrently)
            dropped.append(name)
            bump_generation_on_commit(Scope(org_id=tenant[0], domain_id=tenant[1]))
    for (org, domain), size in sizes.items():
        name = keyword_index_name(org, domain)
        if minimum == 0 or size < minimum or (existing.get((org, domain), ("", False))[1]):
            continue
        statement = sql.SQL(
            "CREATE INDEX {} IF NOT EXISTS {} ON {} USING gin (search_vector)"
            " WHERE org_id = {} AND domain_id = {}"
        ).format(
            sql.SQL("CONCURRENTLY" if concurrently else ""),
            sql.Identifier(name),
            sql.Identifier(MemoryRecord._meta.db_table),
            sql.Literal(int(org)),
            sql.Literal(int(domain)),
        )
        record_indexes.build(statement, concurrently=concurrently)
        created.append(name)
        bump_generation_on_commit(Scope(org_id=org, domain_id=domain))
    return created, dropped


def budget(depth: int) -> int:
    """About how many records a large domain's keyword leg ranks for ``depth`` results."""
    return max(int(memoryhub_settings.KEYWORD_RANK_BUDGET), 5 * depth)


#: A large domain's keyword leg ranks at most this many times its budget of records.
RANKED_PER_BUDGET = 10


def ranked_at_most(depth: int) -> int:
    """The most records a large domain's keyword leg ranks for ``depth`` results."""
    return int(RANKED_PER_BUDGET * budget(depth))


def count(scope: Scope, records: int | None = None) -> int:
    """Count ``scope``'s domain's words again (replacing its statistics); returns how
    many common words it holds."""
    table = MemoryRecord._meta.db_table
    if records is None:
        records = MemoryRecord.unscoped.filter(
            org_id=scope.org_id, domain_id=scope.domain_id
        ).count()
    # ts_stat runs the statement it is given: the two ids are integers, quoted by format.
    statement = (
        f"SELECT %s, %s, word, ndoc FROM ts_stat(format("
        f"'SELECT search_vector FROM {table} WHERE domain_id = %%s AND org_id = %%s',"
        " %s::bigint, %s::bigint)) WHERE ndoc >= %s"
    )
    with transaction.atomic():
        forget(scope, bump=False)  # takes the domain's lock first: see _lock
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {WordFrequency._meta.db_table} (org_id, domain_id, lexeme, records) "
                + statement,
                [
                    scope.org_id,
                    scope.domain_id,
                    scope.domain_id,
                    scope.org_id,
                    COMMON_WORD_RECORDS,
                ],
            )
            words = cursor.rowcount
        WordStatistics.unscoped.create(
            org_id=scope.org_id, domain_id=scope.domain_id, records=records
        )
        bump_generation_on_commit(scope)
    return words


def forget(scope: Scope, *, bump: bool = True) -> None:
    """Delete ``scope``'s domain's word statistics (every erasure in it does): its
    keyword leg ranks every match again until the sweeper counts what remains."""
    with transaction.atomic():
        _lock(scope)
        WordFrequency.unscoped.filter(org_id=scope.org_id, domain_id=scope.domain_id).delete()
        deleted, _ = WordStatistics.unscoped.filter(
            org_id=scope.org_id, domain_id=scope.domain_id
        ).delete()
    if deleted and bump:
        bump_generation_on_commit(scope)


#: The first key of a domain's word-statistics lock (the writer lock's is -1).
WORDS_LOCK_CLASS = -2


def _lock(scope: Scope) -> None:
    """The domain's word-statistics lock, until the transaction ends. An erasure holds
    it from its deletion of the counts to its commit, so a count cannot read the
    erased records and store their words after that deletion: it waits, and reads the
    domain without them (or it ran first, and the erasure deletes what it stored)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s, %s)",
            [WORDS_LOCK_CLASS, int4_key(scope.domain_id)],
        )


def refresh(sizes: dict[tuple[int, int], int]) -> list[str]:
    """Count the words of each domain in ``sizes`` (records per (org, domain)) with at
    least ``KEYWORD_STATISTICS_MIN_RECORDS`` records (0: none) that has no statistics
    yet, or has grown or shrunk by :data:`RECOUNT_SHARE` since; delete those of domains
    under half of it, or gone. Returns the "org/domain" of the domains counted."""
    minimum = int(memoryhub_settings.KEYWORD_STATISTICS_MIN_RECORDS)
    counted_before = {
        (org, domain): records
        for org, domain, records in WordStatistics.unscoped.values_list(
            "org_id", "domain_id", "records"
        )
    }
    for tenant in counted_before:
        if minimum == 0 or sizes.get(tenant, 0) < minimum // 2:
            forget(Scope(org_id=tenant[0], domain_id=tenant[1]))
    counted = []
    for tenant, size in sizes.items():
        if minimum == 0 or size < minimum:
            continue
        before = counted_before.get(tenant)
        if before is not None and abs(size - before) < RECOUNT_SHARE * before:
            continue
        words = count(Scope(org_id=tenant[0], domain_id=tenant[1]), size)
        counted.append(f"{tenant[0]}/{tenant[1]}")
        logger.info(
            "word statistics of domain %s/%s: %s common words in %s records",
            tenant[0],
            tenant[1],
            words,
            size,
        )
    return counted
