"""Conditions and SQL fragments on records that queries, the sweeper and raw statements
share: live (not expired), valid at a time, when a turn occurred, its session and
neighbouring turns."""

from __future__ import annotations

from django.db.models import F, Q
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Coalesce
from django.db.models.lookups import LessThanOrEqual
from django.utils import timezone


def live_q(prefix: str = "", now: object = None) -> Q:
    """The one expiry rule: a record is live until its ``expires_at`` (none: forever).
    ``prefix`` reaches records through a relation (``"records__"``); ``now`` defaults to
    the clock (pass ``Now()`` for a statement reused later: the server's now)."""
    moment = now or timezone.now()
    return Q(**{f"{prefix}expires_at__isnull": True}) | Q(**{f"{prefix}expires_at__gt": moment})


def valid_q(at: object = None, *, as_of: bool = False) -> Q:
    """The one validity rule: a record is valid from its ``valid_from`` (empty: always)
    until its ``valid_until`` (exclusive; empty: still). ``at`` defaults to the clock
    (``Now()`` for a reused statement). ``as_of`` asks what memory held at a moment in
    the past: a record whose ``valid_from`` is empty counts from when it occurred
    (:func:`occurred`), so what was said later is not yet known then."""
    moment = at or timezone.now()
    until = Q(valid_until__isnull=True) | Q(valid_until__gt=moment)
    if as_of:
        return until & Q(LessThanOrEqual(Coalesce(F("valid_from"), occurred()), moment))
    return until & (Q(valid_from__isnull=True) | Q(valid_from__lte=moment))


#: The same rule in SQL, for statements written by hand (``{table}``: the records alias).
LIVE_SQL = "({table}.expires_at IS NULL OR {table}.expires_at > now())"


def occurred() -> Coalesce:
    """The one rule of when a record's content happened (or was said): its
    ``occurred_at``, and when that is not set (every record older than the column, and
    those written without one) its ``created_at``."""
    return Coalesce(F("occurred_at"), F("created_at"))


#: The same expression in SQL (statements written by hand; the indexes on the expression
#: serve both spellings: keep them equal).
OCCURRED_SQL = "COALESCE({table}.occurred_at, {table}.created_at)"


#: A conversation turn names its session in ``metadata["session"]`` (a string or an
#: integer, at most ``SESSION_MAX_LENGTH`` characters): a query's ``context_turns``
#: returns a hit's neighbouring turns of the same session, namespace and knowledge base.
SESSION_KEY = "session"


SESSION_MAX_LENGTH = 200


def session() -> KeyTextTransform:
    """A record's session id as text (NULL when its metadata names none)."""
    return KeyTextTransform(SESSION_KEY, "metadata")


#: The session in SQL, and the condition of the turns index in SQL: a statement that
#: means to use the index states the condition as it is written here.
SESSION_SQL = f"({{table}}.metadata ->> '{SESSION_KEY}')"


TURN_SQL = f"length({SESSION_SQL}) <= {SESSION_MAX_LENGTH}"


def adjacent_turn_sql(table: str, *, after: bool, ids: str = "= ANY(%s::uuid[])") -> str:
    """A statement giving, for each of org ``%s``'s records whose id is ``ids`` (by
    default ``= ANY(%s)`` of a uuid[]; a subquery's ``IN (…)`` works too) that names a
    session, the turn just before it (``after`` False) or just after it in its session
    (same knowledge base and namespace, ordered by when it occurred, ties by id): rows of
    (record id, turn id, turn content). One index range scan of the turns index per
    record, stopping at the first row."""
    occurred_n = OCCURRED_SQL.format(table="n")
    occurred_r = OCCURRED_SQL.format(table="r")
    compare, order = (">", "") if after else ("<", " DESC")
    return (
        f"SELECT r.id, t.id, t.content FROM {table} r CROSS JOIN LATERAL ("
        f"SELECT n.id, n.content FROM {table} n"
        " WHERE n.org_id = r.org_id AND n.domain_id = r.domain_id"
        " AND n.knowledge_base_id = r.knowledge_base_id AND n.namespace = r.namespace"
        f" AND {SESSION_SQL.format(table='n')} = {SESSION_SQL.format(table='r')}"
        f" AND {TURN_SQL.format(table='n')}"
        f" AND {occurred_n} {compare}= {occurred_r}"
        f" AND ({occurred_n}, n.id) {compare} ({occurred_r}, r.id)"
        f" ORDER BY {occurred_n}{order}, n.id{order} LIMIT 1) t"
        f" WHERE r.org_id = %s AND r.id {ids} AND {TURN_SQL.format(table='r')}"
    )
