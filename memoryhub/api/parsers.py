"""A JSON parser that refuses bodies over ``MEMORYHUB["MAX_BODY_BYTES"]`` with a 413."""

from __future__ import annotations

from typing import Any

from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.parsers import JSONParser

from ..conf import memoryhub_settings


class RequestTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "request_too_large"


class BoundedJSONParser(JSONParser):
    """Reads at most the configured number of bytes; a larger body is a JSON 413."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        limit = memoryhub_settings.MAX_BODY_BYTES
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        try:
            if declared and int(declared) > limit:
                raise RequestTooLarge(f"The request body is over {limit} bytes.")
        except ValueError:
            pass
        body = stream.read(limit + 1) if stream is not None else b""
        if len(body) > limit:
            raise RequestTooLarge(f"The request body is over {limit} bytes.")
        from io import BytesIO

        return super().parse(BytesIO(body), media_type, parser_context)
