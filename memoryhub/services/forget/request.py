"""What an erasure is asked and answers: the request, its result, and the keyed hash that
names an erased namespace without keeping it."""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from ... import policy
from ...conf import memoryhub_settings
from ...exceptions import ValidationFailed
from ...vocabulary import MAX_SOURCE_NAME_LENGTH, ForgetRequestSerializer, field_names

logger = logging.getLogger(__name__)


class NothingToForget(ValidationFailed):
    """A forget was malformed or named no selector; forgetting everything needs ``all``."""

    def __init__(
        self,
        message: str = "Name a namespace, key or source, or set all=true.",
        field: str = "non_field_errors",
    ) -> None:
        super().__init__({field: [message]})


@dataclass(frozen=True, slots=True)
class ForgetRequest:
    """What to erase inside a scope. Empty selectors with ``all=False`` are refused.

    ``source`` is a one-name shorthand of ``sources`` (give one or the other). The shared
    namespace (``""``) is every knowledge base's common memory: forgetting it needs an
    explicit ``sources`` list, so an unset variable in a script cannot wipe it.
    """

    namespace: str | None = None
    key: str | None = None
    source: str | None = None
    all: bool = False
    sources: tuple[str, ...] | None = None
    #: The records an import job created (undoing the import).
    import_job: int | None = None

    def __post_init__(self) -> None:  # noqa: C901
        for name in ("namespace", "key", "source"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or "\x00" in value):
                raise NothingToForget("must be a string without NUL characters.", name)
        if self.key is not None and not self.key:
            raise NothingToForget("may not be empty.", "key")
        if self.source is not None and not self.source:
            raise NothingToForget("may not be empty.", "source")
        if not isinstance(self.all, bool):
            raise NothingToForget("must be true or false.", "all")
        if self.sources is not None:
            if self.source is not None:
                raise NothingToForget("give source or sources, not both.", "sources")
            if isinstance(self.sources, str) or not isinstance(self.sources, list | tuple):
                raise NothingToForget("must be a list of knowledge base names.", "sources")
            if not self.sources:
                raise NothingToForget("name at least one knowledge base.", "sources")
            for name in self.sources:
                if (
                    not isinstance(name, str)
                    or not name
                    or "\x00" in name
                    or len(name) > MAX_SOURCE_NAME_LENGTH
                ):
                    raise NothingToForget("must be knowledge base names.", "sources")
            object.__setattr__(self, "sources", tuple(dict.fromkeys(self.sources)))
        elif self.source is not None:
            object.__setattr__(self, "sources", (self.source,))
        if self.import_job is not None and (
            isinstance(self.import_job, bool) or not isinstance(self.import_job, int)
        ):
            raise NothingToForget("must be an import job's id.", "import_job")
        if (
            not self.all
            and self.namespace is None
            and self.key is None
            and self.sources is None
            and self.import_job is None
        ):
            raise NothingToForget()
        if self.namespace == "" and self.key is None and self.sources is None:
            raise NothingToForget(
                'forgetting the shared namespace ("") erases the common memory of every'
                " knowledge base of the domain: name them in sources.",
                "sources",
            )

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ForgetRequest:
        """A forget as a door receives it (a REST body, an MCP tool's arguments): the
        selectors only; any other field is refused by name."""
        unknown = sorted(set(body) - field_names(ForgetRequestSerializer))
        if unknown:
            raise ValidationFailed({name: ["is not a field of a forget."] for name in unknown})
        return cls(
            namespace=body.get("namespace"),
            key=body.get("key"),
            source=body.get("source"),
            sources=body.get("sources"),
            all=body.get("all", False),
        )

    @property
    def is_subject_erasure(self) -> bool:
        """Erasing a data subject's namespace: reaches read-only KBs too."""
        return policy.is_subject_erasure(
            namespace=self.namespace, key=self.key, everything=self.all
        )


@dataclass(slots=True)
class ForgetResult:
    """Counts per knowledge base; ``refused`` names read-only ones that ignored it."""

    deleted: int = 0
    by_source: dict[str, int] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    cancelled_imports: int = 0
    #: The id of the erasure's permanent receipt (``ErasureReceipt``), if it erased.
    receipt: str | None = None


def salted_hash(value: str) -> str:
    """An HMAC of ``value`` keyed by ``ERASURE_RECEIPT_KEY`` (the site's ``SECRET_KEY``
    when unset): comparable, not reversible; a dedicated key survives rotating the
    secret key, so old receipts can still be looked up."""
    key = memoryhub_settings.ERASURE_RECEIPT_KEY or settings.SECRET_KEY
    return hmac.new(key.encode(), value.encode("utf-8"), hashlib.sha256).hexdigest()[:32]
