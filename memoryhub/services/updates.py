"""Updating memory: one record changed by id (REST PUT and PATCH, MCP's
``memory_update``, the admin's form and restore), its previous state kept in its history.

The rules are a write's (validation, the read-only policy, re-indexing when the content
changes), applied to one record under the same locks (:mod:`.write`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from .. import policy, signals
from ..cache import bump_generation_on_commit
from ..exceptions import RecordNotFound, ValidationFailed
from ..items import RecordResult
from ..models import KnowledgeBase, MemoryRecord, RecordVersion
from ..scope import Scope, tenant_scope
from ..vocabulary import RecordUpdate, WriteItem, field_names, items_of
from . import history, supersession
from .dispatch import schedule_indexing
from .records import get_record
from .store.locks import lock_domain, lock_namespaces
from .store.refusals import refuse_record_change
from .store.transient import run_again_when_cancelled
from .write import apply_item, is_unchanged, observe_written

__all__ = ["Updated", "restore_version", "update_record", "update_record_for"]


def _check_update_fields(changes: Any) -> None:
    """An update names only fields a record's update may change (each other one named)."""
    if not isinstance(changes, Mapping):
        raise ValidationFailed({"non_field_errors": ["The body must be an object."]})
    errors: dict[str, list[str]] = {}
    for name in changes:
        if name not in field_names(RecordUpdate):
            message = (
                "cannot be changed; write a new record instead."
                if name in ("namespace", "source", "id")
                else "is not a field of a memory item."
            )
            errors.setdefault(str(name), []).append(message)
    if errors:
        raise ValidationFailed(errors)


def _updated_item(record: MemoryRecord, changes: Mapping[str, Any], *, partial: bool) -> WriteItem:
    """The record as the update would leave it, validated like any written item (PATCH
    merges into the current fields, PUT replaces them; the namespace stays)."""
    if partial:
        current: dict[str, Any] = history.version_fields(record)
        if "ttl_seconds" in changes:
            current.pop("expires_at")
        merged = {**current, **changes}
    else:
        merged = dict(changes)
    merged["namespace"] = record.namespace
    try:
        [item] = items_of([merged])
    except ValidationFailed as exc:
        raise ValidationFailed(
            {path.removeprefix("items[0]."): messages for path, messages in exc.errors.items()}
        ) from None
    return item


def update_record(
    scope: Scope,
    record_id: Any,
    changes: Mapping[str, Any],
    *,
    partial: bool,
    principal: policy.Principal = policy.AGENT,
    cause: str | None = None,
) -> RecordResult:
    """Update one record by id (PUT replaces the updatable fields, PATCH merges).

    The previous state is kept in the record's history (``cause``: default ``admin`` for
    a curator, ``update`` otherwise).

    The namespace and knowledge base of a record do not change. A record of a read-only
    knowledge base is refused (``WriteRefused``, counted) unless ``principal`` may curate
    in its org. A content change sends the record back to pending. An expiry that ends
    the record's life early is a forget: :class:`PolicyDenied` unless ``principal`` may
    forget (:func:`memoryhub.policy.require_forget_to_expire`).
    """
    saved = _update(scope, record_id, changes, partial=partial, principal=principal, cause=cause)
    return RecordResult(str(saved.pk), saved.key, saved.status, False, saved.knowledge_base.name)


@dataclass(frozen=True, slots=True)
class Updated:
    """An update's answer for the principal that asked: the record as saved, or only its
    id and status for a principal that may not read the scope (no content, metadata or
    tags without ``read``)."""

    id: str
    status: str
    record: MemoryRecord | None


def update_record_for(
    scope: Scope,
    record_id: Any,
    changes: Mapping[str, Any],
    *,
    partial: bool,
    principal: policy.Principal,
) -> Updated:
    """:func:`update_record`, answered with what ``principal`` may see of the record as
    saved (an expiry in the past included: the sweeper's from now)."""
    saved = _update(scope, record_id, changes, partial=partial, principal=principal, cause=None)
    readable = policy.allows(
        principal, policy.Action.READ, org_id=scope.org_id, domain_id=scope.domain_id
    )
    return Updated(str(saved.pk), saved.status, saved if readable else None)


def _update(
    scope: Scope,
    record_id: Any,
    changes: Mapping[str, Any],
    *,
    partial: bool,
    principal: policy.Principal,
    cause: str | None,
) -> MemoryRecord:
    """:func:`update_record`'s work: the record as saved (as it was, if unchanged), its
    knowledge base loaded."""
    record = get_record(scope, record_id)
    _check_update_fields(changes)
    refuse_record_change(scope, record, change="update", principal=principal)
    knowledge_base = record.knowledge_base
    item = _updated_item(record, changes, partial=partial)
    supersession.check_closed(record, item)
    if is_unchanged(record, item):
        # Nothing to change (an empty PATCH): no write, no new updated_at, no observation.
        return record

    def save() -> MemoryRecord:
        with transaction.atomic(), tenant_scope(scope):
            lock_domain(scope)
            lock_namespaces(knowledge_base, [record.namespace])
            _check_key_free(record, item.key)
            locked = MemoryRecord.objects.select_for_update().filter(pk=record.pk).first()
            if locked is None:
                raise RecordNotFound(record_id)
            policy.require_forget_to_expire(
                principal,
                scope,
                locked.expires_at,
                item.expires_at,
                field="ttl_seconds" if "ttl_seconds" in changes else "expires_at",
            )
            content_changed = locked.content_hash != item.content_hash
            history.snapshot(
                [locked],
                actor=policy.actor_label(principal),
                cause=cause or _update_cause(scope, principal),
            )
            locked.key = item.key
            apply_item(locked, item, content_changed=content_changed)
            locked.save()
            _announce_update(scope, knowledge_base, locked, content_changed, principal=principal)
        locked.knowledge_base = knowledge_base
        return locked

    return run_again_when_cancelled(save)


def _update_cause(scope: Scope, principal: policy.Principal) -> str:
    if policy.may_bypass_read_only(principal, scope.org_id):
        return RecordVersion.Cause.ADMIN
    return RecordVersion.Cause.UPDATE


def _check_key_free(record: MemoryRecord, key: str | None) -> None:
    """``ValidationFailed`` if another record of ``record``'s namespace has ``key``."""
    if key is None:
        return
    if record.superseded_by is not None:
        return  # a closed record's key is not unique: its successor holds it
    taken = MemoryRecord.objects.filter(
        knowledge_base=record.knowledge_base,
        namespace=record.namespace,
        key=key,
        superseded_by__isnull=True,
    ).exclude(pk=record.pk)
    if taken.exists():
        raise ValidationFailed({"key": ["another record of this namespace has this key."]})


def _announce_update(
    scope: Scope,
    knowledge_base: KnowledgeBase,
    record: MemoryRecord,
    content_changed: bool,
    *,
    principal: policy.Principal,
) -> None:
    """What an updated record tells the rest: the ``record_written`` signal and the
    written observation, its embedding (when its content changed) and the domain's cache
    generation, once committed."""
    signals.send_on_commit(
        signals.record_written,
        scope=scope,
        source=knowledge_base.name,
        created=[],
        updated=[str(record.pk)],
        actor=policy.actor_label(principal),
    )
    observe_written(scope, knowledge_base, created=0, updated=1, principal=principal)
    if content_changed:
        schedule_indexing([str(record.pk)], org_id=scope.org_id)
    bump_generation_on_commit(scope)


def restore_version(
    scope: Scope,
    record_id: Any,
    version: int,
    *,
    principal: policy.Principal = policy.AGENT,
) -> RecordResult:
    """Make a previous state of a record its current one: a new version (cause
    ``restore``) through :func:`update_record`, so the read-only policy, validation,
    re-indexing and the history itself apply as to any update.

    Raises ``RecordNotFound`` when the record, or that version of it, is not in scope.
    """
    record = get_record(scope, record_id)
    with tenant_scope(scope):
        previous = RecordVersion.objects.filter(record_id=record.pk, version=version).first()
    if previous is None:
        raise RecordNotFound(record_id)
    fields = supersession.closed_validity(record, history.version_fields(previous))
    return update_record(
        scope,
        record.pk,
        fields,
        partial=False,
        principal=principal,
        cause=RecordVersion.Cause.RESTORE,
    )
