"""Migration in from the stores teams use today, each written through memoryhub's own
adapter for that peer, so an imported item is the record the adapter would have made:

* :func:`~.langgraph.from_langgraph_postgres`: LangGraph's ``PostgresStore`` (its tables,
  read with LangGraph's own store) through :class:`~memoryhub.integrations.langgraph
  .django.MemoryhubStore`;
* :func:`~.openai_agents.from_openai_agents_sqlite`: an OpenAI Agents ``SQLiteSession``
  database (every session in it, read with the SDK) through
  :class:`~memoryhub.integrations.openai_agents.MemoryhubSession`;
* :func:`~.claude_memory.from_claude_memory_dir`: a directory Claude's memory tool kept
  (``/memories``), through :class:`~memoryhub.integrations.anthropic.StoreMemoryTool`.

Each takes a domain (``Scope``), a knowledge base (``source``), a ``principal`` (who
imports: the ``import`` action in that domain, asked first) and ``dry_run``; each answers
a :class:`PeerImport` saying what was imported and what was skipped and why. Importing
again changes nothing: what is already there is skipped as ``unchanged``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..scope import Scope

__all__ = ["EXAMPLES", "PeerImport", "erased_namespaces"]

#: Examples kept per reason for skipping.
EXAMPLES = 5


@dataclass
class PeerImport:
    """What an import from a peer did (or, in a dry run, would do)."""

    peer: str
    dry_run: bool
    imported: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    #: A few of the skipped, per reason: what they were and why.
    examples: dict[str, list[str]] = field(default_factory=dict)

    def skip(self, reason: str, example: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        kept = self.examples.setdefault(reason, [])
        if len(kept) < EXAMPLES:
            kept.append(example[:300])

    def as_json(self) -> dict[str, Any]:
        return {
            "peer": self.peer,
            "dry_run": self.dry_run,
            "imported": self.imported,
            "skipped": self.skipped,
            "examples": self.examples,
        }


def erased_namespaces(scope: Scope) -> set[str]:
    """The keyed hashes of the namespaces erased in ``scope``'s domain: a peer's items
    carry no trustworthy time, so an import leaves out every item of an erased subject
    (``erased``), whenever it was written."""
    from ..models import ErasureReceipt

    return {
        selector["namespace"]
        for selector in ErasureReceipt.unscoped.filter(
            org_id=scope.org_id, domain_id=scope.domain_id, selector__has_key="namespace"
        ).values_list("selector", flat=True)
        if isinstance(selector, dict) and not selector.get("key") and not selector.get("sources")
    }
