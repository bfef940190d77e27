"""Org archives (``memoryhub_export`` / ``memoryhub_import``): a round trip gives the
same archive back, importing twice changes nothing, another org is never touched, a
damaged or invalid archive writes nothing, and an erased subject never comes back."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from memoryhub import policy
from memoryhub.exceptions import ValidationFailed
from memoryhub.models import ErasureReceipt, KnowledgeBase, MemoryRecord, RecordVersion
from memoryhub.scope import Scope
from memoryhub.services import knowledge_bases, updates, write
from memoryhub.services.archives import ArchiveInvalid, export_archive, import_archive
from memoryhub.services.forget import ForgetRequest, forget
from tenants.models import Domain, Org
from tests.factories import DomainFactory, OrgFactory

pytestmark = pytest.mark.django_db

JAN = "2026-01-01T00:00:00+00:00"
MAR = "2026-03-01T00:00:00+00:00"


def populate(committed, tenant) -> None:
    """A domain with every kind of thing an archive holds: a read-only knowledge base
    with settings, records with every stored field, history, a superseded fact, a
    consolidated fact citing its turns, and an erasure receipt; a second domain."""
    scope = tenant.scope
    handbook = knowledge_bases.ensure_knowledge_base(scope, "handbook", read_only=True)
    KnowledgeBase.unscoped.filter(pk=handbook.pk).update(
        description="Support's handbook", on_write="ignore", refused_writes=3
    )
    committed(
        write.write,
        scope,
        [
            {
                "content": "Refunds take five days.",
                "key": "refunds",
                "kind": "procedural",
                "tags": ["billing"],
                "metadata": {"team": "support", "n": 1},
                "expires_at": "2099-01-01T00:00:00+00:00",
                "occurred_at": JAN,
            }
        ],
        sources=["handbook"],
        principal=policy.SYSTEM,
    )
    refunds = MemoryRecord.unscoped.get(key="refunds")
    committed(
        updates.update_record,
        scope,
        refunds.pk,
        {"content": "Refunds take ten days."},
        partial=True,
        principal=policy.SYSTEM,
    )
    for content, valid_from in (("Alice works at Initech", JAN), ("Alice works at Acme", MAR)):
        committed(
            write.write,
            scope,
            [
                {
                    "content": content,
                    "key": "employer",
                    "namespace": "user:alice",
                    "supersede": True,
                    "valid_from": valid_from,
                }
            ],
        )
    turns = committed(
        write.write,
        scope,
        [{"content": f"turn {n}", "kind": "episodic", "namespace": "user:bob"} for n in range(3)],
    )
    fact = committed(
        write.write, scope, [{"content": "Bob likes tea", "namespace": "user:bob"}]
    ).record_ids[0]
    MemoryRecord.unscoped.filter(pk=fact).update(derived_from=turns.record_ids, consolidation="")
    committed(write.write, scope, [{"content": "Carol's secret", "namespace": "user:carol"}])
    committed(
        forget,
        scope,
        ForgetRequest(namespace="user:carol"),
        principal=policy.SystemPrincipal(label="admin:op"),
    )
    sales = DomainFactory(org=tenant.org, slug="sales", name="Sales")
    committed(write.write, Scope.for_domain(sales), [{"content": "Q3 target is 2M"}])


def body(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as stream:
        return stream.read().splitlines()[1:]


def manifest(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as stream:
        return json.loads(stream.readline())


def wipe(org: Org) -> None:
    """An empty deployment, as far as ``org`` goes: its rows gone, no erasure made."""
    RecordVersion.unscoped.filter(org=org).delete()
    MemoryRecord.unscoped.filter(org=org).delete()
    ErasureReceipt.unscoped.filter(org_id=org.pk).delete()
    KnowledgeBase.unscoped.filter(org=org).delete()
    Domain.objects.filter(org=org).delete()
    org.delete()


def test_a_round_trip_gives_the_same_archive_back(committed, tenant, tmp_path):
    populate(committed, tenant)
    first = tmp_path / "acme.jsonl.gz"
    written = export_archive(tenant.org, first)
    assert written["counts"] == {
        "domain": 2,
        "knowledge_base": 3,
        "receipt": 1,
        "record": 8,
        "version": 2,
    }
    lines = [json.loads(line) for line in body(first)]
    superseded = next(line for line in lines if line.get("content") == "Alice works at Initech")
    assert (superseded["valid_until"], superseded["key"]) == (
        "2026-03-01T00:00:00+00:00",
        "employer",
    )
    assert superseded["superseded_by"] is not None
    receipt = next(line for line in lines if line["type"] == "receipt")
    assert "carol" not in json.dumps(receipt)
    wipe(tenant.org)

    report = committed(import_archive, first)
    assert report.created == {
        "org": 1,
        "domain": 2,
        "knowledge_base": 3,
        "receipt": 1,
        "record": 8,
        "version": 2,
    }
    second = tmp_path / "again.jsonl.gz"
    export_archive(Org.objects.get(slug="acme"), second)
    # Only the manifest's own moment differs: every id, field and timestamp came back.
    assert body(second) == body(first)
    assert {k: v for k, v in manifest(second).items() if k != "created_at"} == {
        k: v for k, v in manifest(first).items() if k != "created_at"
    }
    # The records are searchable again (embedded here, as the archive held no vectors).
    assert MemoryRecord.unscoped.filter(status="indexed").count() == 8


def test_importing_twice_changes_nothing_and_a_dry_run_writes_nothing(committed, tenant, tmp_path):
    populate(committed, tenant)
    archive = tmp_path / "acme.jsonl"
    export_archive(tenant.org, archive)
    rows = MemoryRecord.unscoped.count()

    dry = committed(import_archive, archive, org="acme-copy", dry_run=True)
    assert not Org.objects.filter(slug="acme-copy").exists()
    assert MemoryRecord.unscoped.count() == rows
    real = committed(import_archive, archive, org="acme-copy")
    assert dry.created == real.created and dry.skipped == real.skipped
    assert real.created["record"] == 8 and real.created["org"] == 1

    again = committed(import_archive, archive, org="acme-copy")
    assert again.created == dict.fromkeys(again.created, 0)
    assert again.skipped["unchanged"] == 8
    assert MemoryRecord.unscoped.count() == rows + 8
    # Into the same org, everything is already there.
    same = committed(import_archive, archive)
    assert same.created["record"] == 0 and same.skipped["unchanged"] == 8


def test_importing_into_another_org_never_touches_the_first(
    committed, tenant, other_tenant, tmp_path
):
    populate(committed, tenant)
    committed(write.write, other_tenant.scope, [{"content": "globex's own memory"}])
    before = tmp_path / "before.jsonl"
    export_archive(tenant.org, before)
    globex_before = sorted(
        MemoryRecord.unscoped.filter(org=other_tenant.org).values_list("id", "content")
    )

    report = committed(import_archive, before, org="globex")
    assert report.created["record"] == 8 and report.created["org"] == 0
    copied = MemoryRecord.unscoped.filter(org=other_tenant.org)
    assert copied.count() == 9
    # New ids, links followed: the copy's superseded fact names the copy's successor.
    acme_ids = set(MemoryRecord.unscoped.filter(org=tenant.org).values_list("id", flat=True))
    assert not acme_ids & set(copied.values_list("id", flat=True))
    old = copied.get(content="Alice works at Initech")
    assert copied.filter(pk=old.superseded_by, content="Alice works at Acme").exists()
    fact = copied.get(content="Bob likes tea")
    assert set(fact.derived_from) == set(
        copied.filter(content__startswith="turn ").values_list("id", flat=True)
    )
    # acme is as it was.
    after = tmp_path / "after.jsonl"
    export_archive(tenant.org, after)
    assert body(after) == body(before)
    assert set(globex_before) <= set(copied.values_list("id", "content"))


def test_an_erased_subject_never_comes_back(committed, tenant, tmp_path):
    """Write a subject, export, erase, import the archive: nothing of theirs returns,
    and what they write after the erasure is theirs to keep."""
    populate(committed, tenant)
    archive = tmp_path / "before-erasure.jsonl"
    export_archive(tenant.org, archive)
    committed(
        forget,
        tenant.scope,
        ForgetRequest(namespace="user:alice"),
        principal=policy.SystemPrincipal(label="admin:op"),
    )
    assert not MemoryRecord.unscoped.filter(namespace="user:alice").exists()

    report = committed(import_archive, archive)
    assert report.skipped["erased"] == 2
    assert report.created["record"] == 0
    assert not MemoryRecord.unscoped.filter(namespace="user:alice").exists()
    assert not MemoryRecord.unscoped.filter(content__contains="Initech").exists()

    # Into a fresh org, with the receipt travelling in a later archive.
    later = tmp_path / "after-erasure.jsonl"
    export_archive(tenant.org, later)
    committed(import_archive, later, org="restored")
    old = committed(import_archive, archive, org="restored")
    assert old.skipped["erased"] == 2
    assert not MemoryRecord.unscoped.filter(org__slug="restored", namespace="user:alice").exists()
    # Alice's memory written after her erasure is not what the receipt erased.
    committed(
        write.write, tenant.scope, [{"content": "Alice came back", "namespace": "user:alice"}]
    )
    newer = tmp_path / "newer.jsonl"
    export_archive(tenant.org, newer)
    back = committed(import_archive, newer, org="restored")
    assert back.created["record"] == 1 and back.skipped["erased"] == 0


def test_a_damaged_or_invalid_archive_writes_nothing(committed, tenant, tmp_path):
    populate(committed, tenant)
    archive = tmp_path / "acme.jsonl"
    export_archive(tenant.org, archive)
    text = archive.read_text()
    rows = MemoryRecord.unscoped.count()

    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text(text.replace("Refunds take ten days.", "Refunds take 99 days."))
    with pytest.raises(ArchiveInvalid, match="sha256"):
        import_archive(damaged, org="copy")

    # A line that breaks the write rules is named with its field, even with a fresh hash.
    head, *lines = text.splitlines()
    bad = [json.loads(line) for line in lines]
    record = next(line for line in bad if line["type"] == "record")
    record["kind"] = "gossip"
    record["tags"] = "not-a-list"
    rewritten = [json.dumps(line, sort_keys=True) for line in bad]
    import hashlib

    digest = hashlib.sha256("".join(line + "\n" for line in rewritten).encode()).hexdigest()
    invalid = tmp_path / "invalid.jsonl"
    invalid.write_text(
        json.dumps({**json.loads(head), "sha256": digest}) + "\n" + "\n".join(rewritten) + "\n"
    )
    with pytest.raises(ValidationFailed) as refused:
        import_archive(invalid, org="copy")
    problems = " ".join(refused.value.errors["archive"])
    assert "kind" in problems and "tags" in problems and "line " in problems

    not_an_archive = tmp_path / "notes.jsonl"
    not_an_archive.write_text('{"content": "hello"}\n')
    with pytest.raises(ArchiveInvalid, match="not a memoryhub archive"):
        import_archive(not_an_archive)
    assert MemoryRecord.unscoped.count() == rows
    assert not Org.objects.filter(slug="copy").exists()


def test_receipts_made_with_another_key_are_refused(committed, tenant, tmp_path, settings):
    populate(committed, tenant)
    archive = tmp_path / "acme.jsonl"
    export_archive(tenant.org, archive)
    settings.MEMORYHUB = {**getattr(settings, "MEMORYHUB", {}), "ERASURE_RECEIPT_KEY": "another"}
    with pytest.raises(ArchiveInvalid, match="ERASURE_RECEIPT_KEY"):
        import_archive(archive, org="copy")


def test_vectors_travel_when_the_model_is_the_same(committed, tenant, tmp_path):
    populate(committed, tenant)
    archive = tmp_path / "acme.jsonl"
    export_archive(tenant.org, archive, vectors=True)
    assert manifest(archive)["embedding_models"]
    report = committed(import_archive, archive, org="copy")
    assert report.vectors_reused == 8 and report.to_embed == 0
    original = dict(
        MemoryRecord.unscoped.filter(org=tenant.org).values_list("content", "embedding")
    )
    for content, vector in MemoryRecord.unscoped.filter(org__slug="copy").values_list(
        "content", "embedding"
    ):
        assert list(vector) == list(original[content])


def test_the_commands(committed, tenant, tmp_path, capsys):
    populate(committed, tenant)
    archive = tmp_path / "acme.jsonl.gz"
    call_command("memoryhub_export", "acme", "--output", str(archive), "--domain", "support")
    assert "7 records" in capsys.readouterr().out
    committed(call_command, "memoryhub_import", str(archive), "--org", "copy", "--dry-run")
    out = capsys.readouterr().out
    assert "would import into copy: 7 records" in out
    assert not Org.objects.filter(slug="copy").exists()
    committed(call_command, "memoryhub_import", str(archive), "--org", "copy")
    assert "imported into copy: 7 records" in capsys.readouterr().out
    with pytest.raises(CommandError, match="Unknown org"):
        call_command("memoryhub_export", "nobody", "--output", str(tmp_path / "x.jsonl"))
    with pytest.raises(CommandError, match="no domain"):
        call_command("memoryhub_export", "acme", "--output", str(tmp_path / "x"), "--domain", "x")
    broken = tmp_path / "broken.jsonl"
    broken.write_text("nonsense\n")
    with pytest.raises(CommandError, match="was not imported: archive: not a memoryhub archive"):
        call_command("memoryhub_import", str(broken))
    assert datetime.now(UTC)  # the commands ran in this test's clock


def test_a_key_another_record_holds_is_a_conflict_left_as_it_is(committed, tenant, tmp_path):
    populate(committed, tenant)
    archive = tmp_path / "acme.jsonl"
    export_archive(tenant.org, archive)
    clash = DomainFactory(org=OrgFactory(slug="clash"), slug="support")
    scope = Scope.for_domain(clash)
    knowledge_bases.ensure_knowledge_base(scope, "handbook", read_only=True)
    committed(
        write.write,
        scope,
        [{"content": "Clash's own refunds", "key": "refunds"}],
        sources=["handbook"],
        principal=policy.SYSTEM,
    )
    report = committed(import_archive, archive, org="clash")
    assert report.skipped["conflict"] == 1 and report.created["record"] == 7
    held = MemoryRecord.unscoped.get(org=clash.org, key="refunds")
    assert held.content == "Clash's own refunds"


def test_a_record_deleted_by_id_stays_out_and_only_it(committed, tenant, tmp_path):
    """A delete by id leaves a receipt naming the record: an import refuses that record
    (and what it superseded), not its whole knowledge base."""
    from memoryhub.services.forget import forget_record

    populate(committed, tenant)
    archive = tmp_path / "acme.jsonl"
    export_archive(tenant.org, archive)
    acme_fact = MemoryRecord.unscoped.get(content="Alice works at Acme")
    committed(forget_record, tenant.scope, acme_fact.pk, principal=policy.SYSTEM)
    report = committed(import_archive, archive, org="copy")
    assert report.skipped["erased"] == 2  # the fact, and the one it superseded
    assert report.created["record"] == 6
    copied = set(MemoryRecord.unscoped.filter(org__slug="copy").values_list("content", flat=True))
    assert "Refunds take ten days." in copied and "Q3 target is 2M" in copied
    assert not copied & {"Alice works at Acme", "Alice works at Initech"}


def test_an_org_restored_after_its_deletion_keeps_its_erasures(committed, tenant, tmp_path):
    """Receipts outlive their org: the org's archive, restored after a subject was
    erased and the org deleted, brings nothing of the subject back."""
    populate(committed, tenant)
    archive = tmp_path / "acme.jsonl"
    export_archive(tenant.org, archive)
    committed(
        forget,
        tenant.scope,
        ForgetRequest(namespace="user:alice"),
        principal=policy.SystemPrincipal(label="admin:op"),
    )
    receipts = ErasureReceipt.unscoped.count()
    RecordVersion.unscoped.filter(org=tenant.org).delete()
    MemoryRecord.unscoped.filter(org=tenant.org).delete()
    KnowledgeBase.unscoped.filter(org=tenant.org).delete()
    Domain.objects.filter(org=tenant.org).delete()
    tenant.org.delete()
    assert ErasureReceipt.unscoped.count() == receipts  # kept for good
    report = committed(import_archive, archive)
    assert report.created["org"] == 1 and report.skipped["erased"] == 2
    assert not MemoryRecord.unscoped.filter(namespace="user:alice").exists()


def test_a_fact_derived_from_erased_records_alone_stays_out(committed, tenant, tmp_path):
    populate(committed, tenant)
    alice = list(MemoryRecord.unscoped.filter(namespace="user:alice").values_list("id", flat=True))
    bob = MemoryRecord.unscoped.filter(namespace="user:bob", kind="episodic").first()
    only_alice = committed(
        write.write,
        tenant.scope,
        [{"content": "Ops knows Alice's employer", "namespace": "team:ops"}],
    ).record_ids[0]
    mixed = committed(
        write.write, tenant.scope, [{"content": "Ops knows two people", "namespace": "team:ops"}]
    ).record_ids[0]
    MemoryRecord.unscoped.filter(pk=only_alice).update(derived_from=alice)
    MemoryRecord.unscoped.filter(pk=mixed).update(derived_from=[*alice, bob.pk])
    archive = tmp_path / "acme.jsonl"
    export_archive(tenant.org, archive)
    committed(
        forget,
        tenant.scope,
        ForgetRequest(namespace="user:alice"),
        principal=policy.SystemPrincipal(label="admin:op"),
    )
    report = committed(import_archive, archive, org="copy")
    copied = set(MemoryRecord.unscoped.filter(org__slug="copy").values_list("content", flat=True))
    assert "Ops knows Alice's employer" not in copied
    assert "Ops knows two people" in copied
    assert report.skipped["erased"] == 3


def test_an_erasure_during_an_import_keeps_its_subject_out(
    committed, tenant, tmp_path, monkeypatch
):
    from memoryhub.services.archives import importing

    populate(committed, tenant)
    archive = tmp_path / "acme.jsonl"
    export_archive(tenant.org, archive)
    monkeypatch.setattr(importing, "BATCH", 1)
    erased = []

    def erase_alice_once(done: int) -> None:
        """Once the first of Alice's records has arrived (an erasure that finds nothing
        leaves no receipt), erase her."""
        arrived = MemoryRecord.unscoped.filter(org__slug="copy", namespace="user:alice")
        if erased or not arrived.exists():
            return
        copy = Domain.objects.get(org__slug="copy", slug="support")
        erased.append(
            forget(
                Scope.for_domain(copy),
                ForgetRequest(namespace="user:alice"),
                principal=policy.SystemPrincipal(label="admin:op"),
            )
        )

    report = committed(import_archive, archive, org="copy", progress=erase_alice_once)
    assert erased
    assert not MemoryRecord.unscoped.filter(org__slug="copy", namespace="user:alice").exists()
    assert report.skipped["erased"] >= 1
