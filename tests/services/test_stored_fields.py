"""One tuple of stored fields (``memoryhub.items.STORED_FIELDS``) that every door reads:
a field one door forgot went missing there (an export that could not write a
superseded fact's ``valid_until``; CSV columns that became metadata). Each test writes or
reads a record with every stored field set, so a door that drops one goes red."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime

import pytest

from memoryhub.admin.knowledge import RecordForm
from memoryhub.items import MOMENT_FIELDS, STORED_FIELDS
from memoryhub.models import MemoryRecord, RecordVersion
from memoryhub.services import history, imports, knowledge_bases, records, write
from memoryhub.services.store.persistence import UPSERT_FIELDS
from memoryhub.vocabulary import RecordUpdate, WriteItem, field_names

pytestmark = pytest.mark.django_db

EVERY_FIELD = {
    "content": "plan: pro",
    "key": "plan",
    "kind": "semantic",
    "tags": ["billing"],
    "metadata": {"team": "sales"},
    "expires_at": "2099-01-01T00:00:00+00:00",
    "occurred_at": "2025-03-01T09:30:00+00:00",
    "valid_from": "2025-03-01T09:30:00+00:00",
    "valid_until": "2026-03-01T09:30:00+00:00",
}


def test_the_example_sets_every_stored_field():
    assert set(EVERY_FIELD) == set(STORED_FIELDS)
    assert set(MOMENT_FIELDS) < set(STORED_FIELDS)


def stored(record: MemoryRecord) -> dict:
    values = {name: getattr(record, name) for name in STORED_FIELDS}
    return {
        name: value.isoformat() if name in MOMENT_FIELDS else value
        for name, value in values.items()
    }


def test_an_export_writes_every_stored_field_and_an_import_reads_each_back(tenant, other_tenant):
    kb = knowledge_bases.ensure_knowledge_base(tenant.scope, "facts")
    write.write(tenant.scope, [EVERY_FIELD], sources=["facts"])
    write.write(other_tenant.scope, [{**EVERY_FIELD, "content": "globex plan"}])
    (line,) = list(records.export_lines(kb))
    exported = json.loads(line)
    assert {name: exported[name] for name in STORED_FIELDS} == stored(
        MemoryRecord.unscoped.get(knowledge_base=kb)
    )
    (row,) = imports.parse(line, "jsonl")
    assert {name: row.item[name] for name in STORED_FIELDS} == {
        name: exported[name] for name in STORED_FIELDS
    }


def test_a_csv_column_of_each_stored_field_is_that_field_not_metadata():
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[*STORED_FIELDS, "namespace"])
    writer.writeheader()
    writer.writerow(
        {
            **EVERY_FIELD,
            "tags": ",".join(EVERY_FIELD["tags"]),
            "metadata": "",  # CSV's metadata are its other columns
            "namespace": "user:alice",
        }
    )
    (row,) = imports.parse(out.getvalue(), "csv")
    assert "metadata" not in row.item
    for name in STORED_FIELDS:
        if name != "metadata":
            assert row.item[name] == EVERY_FIELD[name], name


def test_history_keeps_every_stored_field(tenant):
    write.write(tenant.scope, [EVERY_FIELD])
    write.write(tenant.scope, [{**EVERY_FIELD, "content": "plan: enterprise"}])
    record = MemoryRecord.unscoped.get(key="plan")
    version = RecordVersion.unscoped.get(record_id=record.pk)
    assert set(history.version_fields(version)) == set(STORED_FIELDS)
    assert stored(version) == {**EVERY_FIELD, "content": "plan: pro"}


def test_the_admin_form_the_upsert_and_the_api_vocabulary_name_every_stored_field():
    assert set(STORED_FIELDS) <= set(RecordForm.Meta.fields)
    assert set(STORED_FIELDS) - {"key"} <= set(UPSERT_FIELDS)
    assert set(STORED_FIELDS) <= field_names(WriteItem)
    assert set(STORED_FIELDS) <= field_names(RecordUpdate)


def test_a_record_written_with_every_field_stores_each(tenant):
    write.write(tenant.scope, [EVERY_FIELD])
    assert stored(MemoryRecord.unscoped.get(key="plan")) == {
        **EVERY_FIELD,
        **{
            name: datetime.fromisoformat(EVERY_FIELD[name]).astimezone(UTC).isoformat()
            for name in MOMENT_FIELDS
        },
    }
