"""A directory Claude's memory tool kept: each file under it is one file of
:class:`~memoryhub.integrations.anthropic.StoreMemoryTool` in the namespace given (its
path under ``/memories``, its text), created with the tool's own ``create``, so its
rules apply (UTF-8 text, no blank file, the size bound, paths under ``/memories``)."""

from __future__ import annotations

from pathlib import Path

from anthropic.lib.tools import ToolError
from anthropic.types.beta import BetaMemoryTool20250818CreateCommand
from asgiref.sync import async_to_sync

from .. import policy
from ..integrations.anthropic import ROOT, AsyncStoreMemoryTool, memory_key
from ..policy import Action
from ..scope import Scope
from ..services.forget import salted_hash
from ..sources import DjangoMemoryStore
from . import PeerImport, erased_namespaces

__all__ = ["from_claude_memory_dir"]


def from_claude_memory_dir(
    directory: Path | str,
    scope: Scope,
    *,
    namespace: str,
    source: str = "memory",
    dry_run: bool = False,
    principal: policy.Principal = policy.SYSTEM,
) -> PeerImport:
    """Import every file under ``directory`` (the memory tool's ``/memories``) into
    ``namespace``; a file already there with the same text is ``unchanged``, with
    another text ``conflict`` (left as memoryhub has it)."""
    policy.require(principal, Action.IMPORT, scope)
    report = PeerImport(peer="claude-memory-dir", dry_run=dry_run)
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"no directory {str(root)!r}")
    store = DjangoMemoryStore(scope, source=source, principal=principal)
    files = sorted(p for p in root.rglob("*") if p.is_file())
    if salted_hash(namespace) in erased_namespaces(scope):
        for path in files:
            report.skip(
                "erased", f"{path.relative_to(root).as_posix()}: {namespace} was erased here"
            )
        return report
    async_to_sync(_import)(files, root, namespace, store, report)
    return report


async def _import(
    files: list[Path],
    root: Path,
    namespace: str,
    store: DjangoMemoryStore,
    report: PeerImport,
) -> None:
    """Each file through the tool's ``create`` (one event loop: the store's database
    calls run in the caller's thread, on its connection)."""
    tool = AsyncStoreMemoryTool(store, scope=namespace)
    for path in files:
        relative = path.relative_to(root).as_posix()
        address = f"{ROOT}/{relative}"
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError) as exc:
            report.skip("unreadable", f"{relative}: {exc}")
            continue
        try:
            key = memory_key(address)
        except ToolError as exc:
            report.skip("invalid", f"{relative}: {exc}")
            continue
        if report.dry_run:
            held = await store.get(scope=namespace, key=key)
            if held is not None:
                report.skip("unchanged" if held.value == text else "conflict", relative)
            elif not text.strip():
                report.skip("invalid", f"{relative}: blank")
            else:
                report.imported += 1
            continue
        command = BetaMemoryTool20250818CreateCommand(
            command="create", path=address, file_text=text
        )
        try:
            await tool.create(command)
        except ToolError as exc:
            if "already exists" not in str(exc):
                report.skip("invalid", f"{relative}: {exc}")
                continue
            held = await store.get(scope=namespace, key=key)
            same = held is not None and held.value == text
            report.skip("unchanged" if same else "conflict", relative)
            continue
        report.imported += 1
