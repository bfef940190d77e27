"""What an erasure is asked and answers: the request, its result, and the keyed hash that
names an erased namespace without keeping it."""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

from django.conf import settings

from ... import policy
from ...conf import memoryhub_settings
from ...exceptions import ValidationFailed
from ...vocabulary import ForgetBody, Refused, Rule, field_names
from ...vocabulary.rules import is_integer

__all__ = ["ForgetRequest", "ForgetResult", "NothingToForget", "salted_hash"]

logger = logging.getLogger(__name__)


class NothingToForget(ValidationFailed):
    """A forget was malformed or named no selector; forgetting everything needs ``all``."""

    def __init__(
        self,
        message: str
        | Mapping[str, list[str]] = "Name a namespace, key or source, or set all=true.",
        field: str = "non_field_errors",
    ) -> None:
        super().__init__({field: [message]} if isinstance(message, str) else message)


def _import_job(value: Any) -> int:
    if not is_integer(value):
        raise Refused("must be an import job's id.")
    return int(value)


class ForgetRequest(ForgetBody):
    """What to erase inside a scope: the command the erasure service takes. Empty
    selectors with ``all=False`` are refused.

    ``source`` is a one-name shorthand of ``sources`` (give one or the other). The shared
    namespace (``""``) is every knowledge base's common memory: forgetting it needs an
    explicit ``sources`` list, so an unset variable in a script cannot wipe it.
    """

    refusal: ClassVar[type[ValidationFailed]] = NothingToForget

    #: The records an import job created (undoing the import); no door's field.
    import_job: Annotated[
        int | None, Rule(_import_job, lambda: {"type": "integer"}, nullable=True)
    ] = None

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ForgetRequest:
        """A forget as a door receives it (a REST body, an MCP tool's arguments): the
        selectors only; any other field is refused by name."""
        if isinstance(body, Mapping):
            unknown = sorted(set(body) - field_names(ForgetBody), key=str)
            if unknown:
                raise ValidationFailed({str(name): [ForgetBody.unknown] for name in unknown})
        return cls.parse(body)

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
