"""A data subject's access export: whose memory to give them."""

from typing import Annotated, ClassVar

from . import rules
from .base import Request

__all__ = ["SubjectExportBody"]


class SubjectExportBody(Request):
    """Everything held about one data subject (GDPR Art. 15 and 20)."""

    schema_name: ClassVar[str] = "SubjectExportRequest"
    unknown: ClassVar[str] = "is not a field of an access export."

    namespace: Annotated[
        str,
        rules.text(
            "MAX_NAMESPACE_LENGTH",
            name=True,
            help="The data subject's namespace (\"user:alice\"); the shared namespace is nobody's.",
        ),
    ]
