"""memoryhub's HTTP client, for agents in other services: no Django needed.

Importing this package imports neither Django nor Django REST framework, nor a memoryhub
module that does: it needs httpx and the standard library, so a plain Python process
(no ``DJANGO_SETTINGS_MODULE``, no Django installed) uses it as it is::

    from memoryhub.client import HttpMemory, HttpMemoryStore, StoredRecord

    memory = HttpMemory("https://memory.example.com", api_key=key, domain="support")
    store = HttpMemoryStore("https://memory.example.com", api_key=key, domain="support")
    await store.put(StoredRecord(scope="user:alice", key="currency", value="EUR"))

* :class:`HttpMemory`, a memory source (``query``, ``write``) that composes with
  :mod:`memoryhub.sources`;
* :class:`HttpMemoryStore` and :class:`SyncHttpMemoryStore`, the key/value
  :class:`MemoryStore` (``put``, ``get``, ``search``, ``forget``) of
  :class:`StoredRecord` values, async and blocking;
* :class:`HttpMemoryError` (an error status: ``status``, ``code``, ``detail``,
  ``errors``) and its subclasses that are also memoryhub's domain errors
  (:mod:`memoryhub.exceptions`, Django-free too).

What they return is :class:`memoryhub.items.MemoryItem` and
:class:`memoryhub.items.WriteResult` (Django-free as well). The tenant is always the API
key's.
"""

from .errors import (
    HttpMemoryError,
    HttpPolicyDenied,
    HttpUnknownSource,
    HttpValidationFailed,
    HttpWriteRefused,
)
from .http import HttpMemory
from .stores import (
    HttpMemoryStore,
    MemoryKind,
    MemoryStore,
    StoredRecord,
    StoredVersion,
    SyncHttpMemoryStore,
)

__all__ = [
    "HttpMemory",
    "HttpMemoryError",
    "HttpMemoryStore",
    "HttpPolicyDenied",
    "HttpUnknownSource",
    "HttpValidationFailed",
    "HttpWriteRefused",
    "MemoryKind",
    "MemoryStore",
    "StoredRecord",
    "StoredVersion",
    "SyncHttpMemoryStore",
]
