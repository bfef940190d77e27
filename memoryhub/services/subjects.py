"""A data subject's access export (GDPR Art. 15 and 20): everything memoryhub holds
about one namespace, as one JSON document.

In one domain (an API key's door) or every domain of the org (an operator's): the
subject's records in every knowledge base, read-only ones included, with every stored
field, validity, supersession links and earlier states; the facts consolidation derived
from their records elsewhere, with their provenance (a fact that also cites others'
records only as the citation); and the erasures of their namespace
(the receipts, which name them by keyed hash). Observations name no subject, so none is
theirs to give.

The document is streamed: the ids are read first (one index scan), then the records a
page at a time, so the memory and the time it takes follow the subject's size, not the
domain's. The export itself is logged (an observation naming the subject by keyed hash).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from django.utils import timezone

from tenants.models import Domain

from .. import observe, policy
from ..models import ErasureReceipt, KnowledgeBase, MemoryRecord, Observation
from ..policy import Action
from ..scope import Scope
from ..vocabulary import SubjectExportBody
from .archives.exporting import RECORD_FIELDS, plain, versions_of
from .forget import salted_hash

__all__ = ["PAGE", "access_export"]

#: Records read per statement.
PAGE = 1000


def access_export(
    domains: Sequence[Domain],
    namespace: Any,
    *,
    principal: policy.Principal = policy.SYSTEM,
) -> Iterator[str]:
    """The subject ``namespace``'s access export across ``domains`` (of one org), as
    pieces of one JSON document.

    Checked before the first piece: the namespace (a non-empty name; the shared one is
    nobody's), and that ``principal`` may export in each domain
    (:class:`~memoryhub.exceptions.PolicyDenied` otherwise). The export is logged then.
    """
    namespace = SubjectExportBody.parse({"namespace": namespace}).namespace
    if len({domain.org_id for domain in domains}) > 1:
        raise ValueError("an access export reads one org's domains")
    for domain in domains:
        policy.require(principal, Action.EXPORT, Scope.for_domain(domain))
    found = [(domain, _record_ids(domain, namespace)) for domain in domains]
    for domain, ids in found:
        observe.record_in_scope(
            Observation.Kind.SUBJECT_EXPORTED,
            Scope.for_domain(domain),
            count=len(ids),
            payload={"namespace": salted_hash(namespace), "records": len(ids)},
            actor=policy.actor_label(principal),
        )
    return _document(found, namespace)


def _record_ids(domain: Domain, namespace: str) -> list[Any]:
    """The subject's record ids in ``domain``, in order (the scope index, one scan)."""
    return list(
        MemoryRecord.unscoped.filter(org_id=domain.org_id, domain_id=domain.pk, namespace=namespace)
        .order_by("id")
        .values_list("id", flat=True)
    )


def _document(found: list[tuple[Domain, list[Any]]], namespace: str) -> Iterator[str]:
    org = found[0][0].org.slug if found else ""
    head = {
        "subject": {"namespace": namespace},
        "org": org,
        "domains": [domain.slug for domain, _ in found],
        "exported_at": timezone.now().isoformat(),
    }
    yield _json(head)[:-1] + ',"records":['
    counts = {"records": 0, "derived_elsewhere": 0, "erasures": 0}
    first = True
    for domain, ids in found:
        for line in _records(domain, ids):
            yield ("" if first else ",") + _json(line)
            first = False
            counts["records"] += 1
    yield '],"derived_elsewhere":['
    first = True
    for domain, ids in found:
        for line in _derived_elsewhere(domain, ids, namespace):
            yield ("" if first else ",") + _json(line)
            first = False
            counts["derived_elsewhere"] += 1
    erasures = [receipt for domain, _ in found for receipt in _erasures(domain, namespace)]
    counts["erasures"] = len(erasures)
    yield '],"erasures":' + _json(erasures)
    yield ',"counts":' + _json(counts) + "}\n"


def _json(value: Any) -> str:
    """Compact, as the REST API answers."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _records(domain: Domain, ids: list[Any]) -> Iterator[dict[str, Any]]:
    names = dict(
        KnowledgeBase.unscoped.filter(org_id=domain.org_id, domain=domain).values_list("pk", "name")
    )
    for start in range(0, len(ids), PAGE):
        page = ids[start : start + PAGE]
        rows = MemoryRecord.unscoped.filter(org_id=domain.org_id, pk__in=page).values(
            *RECORD_FIELDS, "knowledge_base_id"
        )
        by_id = {row["id"]: row for row in rows}
        states = versions_of(domain.org_id, page)
        for pk in page:
            row = by_id.get(pk)
            if row is None:  # forgotten meanwhile
                continue
            yield _line(domain, names, row) | {"versions": states.get(pk, [])}


def _line(domain: Domain, names: dict[int, str], row: dict[str, Any]) -> dict[str, Any]:
    line = {"domain": domain.slug, "knowledge_base": names.get(row["knowledge_base_id"], "")}
    line.update((field, plain(row[field])) for field in RECORD_FIELDS)
    return line


def _derived_elsewhere(domain: Domain, ids: list[Any], namespace: str) -> Iterator[dict[str, Any]]:
    """Facts outside the subject's namespace that consolidation derived from their
    records: whole when all their sources are the subject's, else only which of the
    subject's records they cite (the rest is other people's)."""
    names = dict(
        KnowledgeBase.unscoped.filter(org_id=domain.org_id, domain=domain).values_list("pk", "name")
    )
    theirs = set(ids)
    seen: set[Any] = set()
    for start in range(0, len(ids), PAGE):
        rows = (
            MemoryRecord.unscoped.filter(
                org_id=domain.org_id,
                domain_id=domain.pk,
                derived_from__overlap=ids[start : start + PAGE],
            )
            # The sources' partial index holds facts only: the planner must see that
            # condition to use it (else it reads the whole table, page after page).
            .exclude(derived_from=[])
            .exclude(namespace=namespace)
            .values(*RECORD_FIELDS, "knowledge_base_id")
        )
        for row in rows:
            if row["id"] in seen:
                continue
            seen.add(row["id"])
            if set(row["derived_from"]) <= theirs:
                yield _line(domain, names, row)
            else:
                yield {
                    "id": str(row["id"]),
                    "domain": domain.slug,
                    "knowledge_base": names.get(row["knowledge_base_id"], ""),
                    "cites": [str(pk) for pk in row["derived_from"] if pk in theirs],
                }


def _erasures(domain: Domain, namespace: str) -> list[dict[str, Any]]:
    """The receipts of erasures that named the subject's namespace in ``domain``."""
    return [
        {
            "id": str(receipt.pk),
            "erased_at": receipt.created_at.isoformat(),
            "domain": domain.slug,
            "by_source": receipt.by_source,
            "deleted": receipt.deleted,
        }
        for receipt in ErasureReceipt.unscoped.filter(
            org_id=domain.org_id,
            domain_id=domain.pk,
            selector__namespace=salted_hash(namespace),
        ).order_by("created_at")
    ]
