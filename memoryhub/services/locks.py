"""Keys of PostgreSQL's two-key advisory locks, which take two ``int4``.

The first key is a lock's class (a negative constant, such as ``write.DOMAIN_LOCK_CLASS``,
or a knowledge base's id, which is positive); the second is an id of the thing locked.
"""

from __future__ import annotations

INT4_MAX = 2_147_483_647


def int4_key(pk: int) -> int:
    """``pk`` (a ``bigint`` id) as an ``int4`` advisory-lock key. Two ids that fold to
    the same key share one lock: they wait for each other more than they need to, never
    less."""
    return pk % INT4_MAX
