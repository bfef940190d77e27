"""An OpenAI Agents SDK ``SQLiteSession`` database: every session in it, read with the
SDK's own ``SQLiteSession``, added through
:class:`~memoryhub.integrations.openai_agents.MemoryhubSession` (each item an episodic
record of the session's namespace, in order)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agents import SQLiteSession
from asgiref.sync import async_to_sync

from .. import policy
from ..exceptions import ValidationFailed
from ..integrations.openai_agents import MAX_ITEMS, InvalidSessionItems, MemoryhubSession
from ..policy import Action
from ..scope import Scope
from ..services.forget import salted_hash
from ..sources import DjangoMemoryStore
from . import PeerImport, erased_namespaces

__all__ = ["from_openai_agents_sqlite"]


def from_openai_agents_sqlite(
    database: Path | str,
    scope: Scope,
    *,
    source: str = "memory",
    sessions_table: str = "agent_sessions",
    messages_table: str = "agent_messages",
    dry_run: bool = False,
    principal: policy.Principal = policy.SYSTEM,
) -> PeerImport:
    """Import each session of the SQLite database ``database`` into its namespace
    (``session:<id>``); a session that already has items here is ``unchanged``."""
    policy.require(principal, Action.IMPORT, scope)
    path = Path(database)
    if not path.is_file():
        raise FileNotFoundError(f"no file {str(path)!r}")
    report = PeerImport(peer="openai-agents-sqlite", dry_run=dry_run)
    store = DjangoMemoryStore(scope, source=source, principal=principal)
    erased = erased_namespaces(scope)
    for session_id in _sessions(path, sessions_table):
        items = async_to_sync(
            SQLiteSession(
                session_id, path, sessions_table=sessions_table, messages_table=messages_table
            ).get_items
        )()
        target = MemoryhubSession(session_id, store)
        if salted_hash(target.namespace) in erased:
            report.skip("erased", f"session {session_id}: its namespace was erased here")
            continue
        if async_to_sync(target.get_items)(limit=1):
            report.skip("unchanged", f"session {session_id}: already here")
            continue
        if not items:
            report.skip("empty", f"session {session_id}: no items")
            continue
        if not dry_run:
            try:
                # In calls the session takes (MAX_ITEMS at most), in order.
                for start in range(0, len(items), MAX_ITEMS):
                    async_to_sync(target.add_items)(items[start : start + MAX_ITEMS])
            except (ValidationFailed, InvalidSessionItems) as exc:
                async_to_sync(target.clear_session)()
                report.skip("invalid", f"session {session_id}: {exc}")
                continue
        report.imported += len(items)
    return report


def _sessions(path: Path, table: str) -> list[str]:
    """The session ids the database holds, oldest first."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        quoted = '"' + table.replace('"', '""') + '"'
        rows = connection.execute(f"SELECT session_id FROM {quoted} ORDER BY created_at")
        return [str(row[0]) for row in rows]
