"""Recording observations: the append-only operator timeline."""

from __future__ import annotations

from typing import Any

from .models import Observation
from .scope import Scope


def record(
    kind: str,
    *,
    org_id: int,
    domain_id: int | None = None,
    source: str = "",
    count: int = 0,
    payload: dict[str, Any] | None = None,
    actor: str = "",
) -> Observation:
    """Append one observation. ``payload`` must never hold memory content in clear."""
    return Observation.unscoped.create(
        kind=kind,
        org_id=org_id,
        domain_id=domain_id,
        source=source,
        count=count,
        payload=payload or {},
        actor=actor[:150],
    )


def record_in_scope(
    kind: str,
    scope: Scope,
    *,
    source: str = "",
    count: int = 0,
    payload: dict[str, Any] | None = None,
    actor: str = "",
) -> Observation:
    return record(
        kind,
        org_id=scope.org_id,
        domain_id=scope.domain_id,
        source=source,
        count=count,
        payload=payload,
        actor=actor,
    )
