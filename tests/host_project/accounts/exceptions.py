"""The host's own DRF exception handler: a different error shape, for its own API."""

from typing import Any

from rest_framework.response import Response


def host_exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    return Response({"host_error": type(exc).__name__}, status=418)
