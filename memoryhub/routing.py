"""Which reads may go to a read replica: only those a caller marks as read-only.

memoryhub never picks a database itself. A site with a replica installs a router (the
runnable site's is ``config.routers.ReplicaRouter``) that asks :func:`replica_allowed`:
reads are replica-safe only inside :func:`replica_reads` (the API marks its GET
endpoints so), and stop being so for the rest of the block once anything is written
there, so a request reads its own writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["note_write", "replica_allowed", "replica_reads"]


@dataclass(slots=True)
class _ReadOnlyBlock:
    wrote: bool = False


_block: ContextVar[_ReadOnlyBlock | None] = ContextVar("memoryhub_replica_reads", default=None)


@contextmanager
def replica_reads() -> Iterator[None]:
    """Mark the block's reads as allowed to come from a replica (slightly stale)."""
    token = _block.set(_ReadOnlyBlock())
    try:
        yield
    finally:
        _block.reset(token)


def replica_allowed() -> bool:
    """True inside :func:`replica_reads` until the block writes anything."""
    block = _block.get()
    return block is not None and not block.wrote


def note_write() -> None:
    """A write happened: later reads of the block must see it, so they use the primary."""
    block = _block.get()
    if block is not None:
        block.wrote = True
