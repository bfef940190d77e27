"""LangGraph's ``PostgresStore``: the items of its ``store`` table, read in key order a
page at a time, put through :class:`~memoryhub.integrations.langgraph.django
.MemoryhubStore` (the namespace's first label the record's namespace, the rest and the
item's key the record's key, the value its metadata, the value's JSON its content)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import psycopg
from langgraph.store.base import GetOp, Item, PutOp

from .. import policy
from ..exceptions import ValidationFailed
from ..integrations.langgraph.django import MemoryhubStore
from ..policy import Action
from ..scope import Scope
from ..services.forget import salted_hash
from . import PeerImport, erased_namespaces

__all__ = ["PAGE", "from_langgraph_postgres"]

#: Items read per statement.
PAGE = 100


def from_langgraph_postgres(
    conninfo: str,
    scope: Scope,
    *,
    source: str = "memory",
    dry_run: bool = False,
    principal: policy.Principal = policy.SYSTEM,
) -> PeerImport:
    """Import every item of the ``PostgresStore`` at ``conninfo``; an item already here
    with the same value is ``unchanged``, with another ``conflict`` (left as memoryhub
    has it); an expired one is ``expired``."""
    policy.require(principal, Action.IMPORT, scope)
    report = PeerImport(peer="langgraph-postgres", dry_run=dry_run)
    target = MemoryhubStore(scope, principal=principal, source=source)
    erased = erased_namespaces(scope)
    with psycopg.connect(conninfo) as connection:
        for page in _pages(connection):
            kept = [row for row in page if not _erased(row, erased, report)]
            _import_page(target, kept, report)
    return report


def _erased(row: tuple[Any, ...], erased: set[str], report: PeerImport) -> bool:
    prefix, key = row[0], row[1]
    if salted_hash(prefix.split(".")[0]) in erased:
        report.skip("erased", f"{prefix}/{key}")
        return True
    return False


def _pages(connection: psycopg.Connection[Any]) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = 'store' AND column_name = 'expires_at'"
        )
        expiring = cursor.fetchone() is not None
    expires = "expires_at" if expiring else "NULL::timestamptz"
    after: tuple[str, str] = ("", "")
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT prefix, key, value, {expires} FROM store"
                " WHERE (prefix, key) > (%s, %s) ORDER BY prefix, key LIMIT %s",
                [*after, PAGE],
            )
            rows = cursor.fetchall()
        if not rows:
            return
        yield rows
        after = (rows[-1][0], rows[-1][1])


def _readable(
    target: MemoryhubStore, wanted: list[tuple[Any, ...]], report: PeerImport
) -> tuple[list[tuple[Any, ...]], list[Any]]:
    kept, held = [], []
    for each in wanted:
        try:
            [item] = target.batch([GetOp(each[0], each[1])])
        except ValidationFailed as exc:
            report.skip("invalid", f"{'.'.join(each[0])}/{each[1]}: {exc.errors}")
            continue
        kept.append(each)
        held.append(item)
    return kept, held


def _import_page(target: MemoryhubStore, rows: list[tuple[Any, ...]], report: PeerImport) -> None:
    now = datetime.now(UTC)
    wanted = [
        (tuple(prefix.split(".")), key, value, expires) for prefix, key, value, expires in rows
    ]
    try:
        held = target.batch([GetOp(namespace, key) for namespace, key, _, _ in wanted])
    except ValidationFailed:  # a key memoryhub's bounds refuse: find it, go on without it
        wanted, held = _readable(target, wanted, report)
    puts = []
    for (namespace, key, value, expires), item in zip(wanted, held, strict=True):
        name = f"{'.'.join(namespace)}/{key}"
        if expires is not None and expires <= now:
            report.skip("expired", name)
        elif isinstance(item, Item):
            report.skip("unchanged" if item.value == value else "conflict", name)
        else:
            ttl = (
                None if expires is None else max(1, math.ceil((expires - now).total_seconds() / 60))
            )
            puts.append(PutOp(namespace, key, value, ttl=ttl))
    if report.dry_run or not puts:
        report.imported += len(puts)
        return
    try:
        target.batch(puts)
    except ValidationFailed:
        for op in puts:  # one by one, to say which item the rules refused
            try:
                target.batch([op])
            except ValidationFailed as exc:
                report.skip("invalid", f"{'.'.join(op.namespace)}/{op.key}: {exc.errors}")
            else:
                report.imported += 1
        return
    report.imported += len(puts)
