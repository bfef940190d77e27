"""The schema a cluster distributed by org accepts, checked on any PostgreSQL: every table
with tenant data is declared distributed, and its keys hold ``org_id``."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db import connection

from memoryhub.services import distribution

pytestmark = pytest.mark.django_db


def constraints(table: str) -> list[tuple[str, str, list[str], str | None]]:
    """(name, type, columns, referenced table) of the primary keys, unique constraints and
    indexes, and foreign keys of ``table``."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.conname, c.contype,"
            " ARRAY(SELECT attname FROM pg_attribute WHERE attrelid = c.conrelid"
            " AND attnum = ANY (c.conkey)), c.confrelid::regclass::text"
            " FROM pg_constraint c WHERE c.conrelid = %s::regclass AND c.contype IN ('p', 'u', 'f')"
            " UNION ALL SELECT i.indexrelid::regclass::text, 'i',"
            " ARRAY(SELECT attname FROM pg_attribute WHERE attrelid = i.indrelid"
            " AND attnum = ANY (i.indkey)), NULL FROM pg_index i"
            " WHERE i.indrelid = %s::regclass AND i.indisunique",
            [table, table],
        )
        return [
            (name, kind, list(columns), target) for name, kind, columns, target in cursor.fetchall()
        ]


def test_every_table_holding_an_org_id_is_distributed_or_tenancy() -> None:
    placed = {model._meta.db_table for model in distribution.DISTRIBUTED + distribution.REFERENCE}
    holding = {
        model._meta.db_table
        for model in apps.get_models()
        if any(field.column == "org_id" for field in model._meta.concrete_fields)
    }
    assert holding - placed == set()


@pytest.mark.parametrize("model", distribution.DISTRIBUTED, ids=lambda m: m._meta.db_table)
def test_a_distributed_tables_keys_hold_the_org(model) -> None:
    distributed = {other._meta.db_table for other in distribution.DISTRIBUTED}
    offending = [
        (name, columns)
        for name, kind, columns, target in constraints(model._meta.db_table)
        if (kind in "pui" or target in distributed) and "org_id" not in columns
    ]
    assert offending == []


def test_every_key_between_tenant_tables_is_declared_and_made() -> None:
    distributed = {model._meta.db_table for model in distribution.DISTRIBUTED}
    made = {
        (model._meta.db_table, tuple(sorted(columns)), target)
        for model in distribution.DISTRIBUTED
        for _, kind, columns, target in constraints(model._meta.db_table)
        if kind == "f" and target in distributed
    }
    declared = {
        (
            model._meta.db_table,
            tuple(sorted([model._meta.get_field(name).column, "org_id"])),
            model._meta.get_field(name).related_model._meta.db_table,
        )
        for model, name in distribution.TENANT_KEYS
    }
    assert made == declared


def test_a_key_between_tenant_tables_refuses_another_orgs_row(tenant, other_tenant) -> None:
    """A record cannot point at a knowledge base of another org: the key holds the org."""
    from django.db import IntegrityError, transaction

    from memoryhub.models import KnowledgeBase, MemoryRecord

    theirs = KnowledgeBase.unscoped.create(
        org=other_tenant.org, domain=other_tenant.domain, name="theirs"
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        MemoryRecord.unscoped.create(
            org=tenant.org, domain=tenant.domain, knowledge_base=theirs, content="x"
        )
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


def test_a_table_left_undistributed_or_apart_is_named() -> None:
    """What the system check (memoryhub.W006) and ``memoryhub_citus status`` report."""
    places = {
        model._meta.db_table: distribution.Placement("distributed", "org_id", 1)
        for model in distribution.DISTRIBUTED
    }
    places |= {
        model._meta.db_table: distribution.Placement("reference")
        for model in distribution.REFERENCE
    }
    assert distribution.problems_in(places) == []
    places["memoryhub_recordversion"] = distribution.Placement("local")
    places["memoryhub_observation"] = distribution.Placement("distributed", "org_id", 2)
    del places["tenants_apikey"]
    assert distribution.problems_in(places) == [
        "memoryhub_recordversion is a local table, not distributed by org_id",
        "the tenant tables are not co-located (several co-location groups)",
        "tenants_apikey is a postgres table, not a reference table",
    ]


def test_a_plain_postgresql_gets_no_distribution_warning() -> None:
    from memoryhub.checks import check_database

    assert [m.id for m in check_database(databases=["default"])] == []
