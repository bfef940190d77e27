"""memoryhub in the Django admin.

memoryhub's models refuse unscoped queries; every view here runs on the explicit
operator path (``operator_access``), shows a staff user only their orgs' rows, and
changes memory only through the services (curation, import, erasure, re-embedding).
"""

from . import archives, erasure, knowledge, observations, receipts, records  # noqa: F401
from .base import OperatorAdmin

__all__ = ["OperatorAdmin"]
