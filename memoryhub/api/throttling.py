"""Per-key throttling: each API key (or staff user) has its own budget."""

from __future__ import annotations

from typing import Any

from rest_framework.throttling import SimpleRateThrottle

from ..conf import memoryhub_settings
from .authentication import request_api_key


class ApiKeyRateThrottle(SimpleRateThrottle):
    """Rate from ``MEMORYHUB["THROTTLE_RATE"]`` (``None`` disables throttling)."""

    scope = "memoryhub"

    def get_rate(self) -> str | None:
        return memoryhub_settings.THROTTLE_RATE

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        api_key = request_api_key(request)
        if api_key is not None:
            ident = f"key:{api_key.prefix}"
        elif request.user and request.user.is_authenticated:
            ident = f"user:{request.user.pk}"
        else:
            ident = f"ip:{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}
