"""Request bodies: bounded JSON, with a JSON 413 past ``MEMORYHUB["MAX_BODY_BYTES"]``.

The parser reads the body itself, at most the limit plus one byte, whatever the
``Content-Length`` says or whether there is one. (DRF's ``JSONParser`` is fed the whole
``request.body``, which Django refuses past ``DATA_UPLOAD_MAX_MEMORY_SIZE`` with an
exception the API would answer as a 500.) JSON that Python cannot parse (invalid UTF-8,
``NaN``, nesting deeper than the interpreter's recursion limit, an object that gives a
key twice) is a 400 ``parse_error``; strings holding unpaired UTF-16 surrogates
(``"\\ud800"``), which no database, embedder or response could encode, are a 400 naming
the field.
"""

from __future__ import annotations

from io import BytesIO
from typing import Any

from django.conf import settings
from django.core.handlers.wsgi import LimitedStream
from rest_framework import exceptions, renderers, status
from rest_framework.exceptions import APIException
from rest_framework.parsers import BaseParser
from rest_framework.utils import json

from .. import boundary
from ..conf import memoryhub_settings


class RequestTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "request_too_large"


class LengthRequired(APIException):
    status_code = status.HTTP_411_LENGTH_REQUIRED
    default_detail = "A request body needs a Content-Length header."
    default_code = "length_required"


def _too_large(limit: int) -> RequestTooLarge:
    return RequestTooLarge(f"The request body is over {limit} bytes.")


def read_chunked_body(request: Any) -> None:
    """Make a chunked body (no ``Content-Length``) readable, or refuse it.

    Django reads nothing of a body without a ``Content-Length``, so a chunked request
    would silently arrive empty. When the server says its input stream ends with the
    body (``wsgi.input_terminated``, as gunicorn does) the body is read here, bounded;
    otherwise the request is a 411.
    """
    meta = request.META
    if "chunked" not in meta.get("HTTP_TRANSFER_ENCODING", "").lower():
        return
    if meta.get("CONTENT_LENGTH"):
        return
    django_request = getattr(request, "_request", request)
    environ = getattr(django_request, "environ", {})
    if not environ.get("wsgi.input_terminated"):
        raise LengthRequired()
    limit = memoryhub_settings.MAX_BODY_BYTES
    body = environ["wsgi.input"].read(limit + 1)
    if len(body) > limit:
        raise _too_large(limit)

    django_request._stream = LimitedStream(BytesIO(body), len(body))
    meta["CONTENT_LENGTH"] = str(len(body))


class BoundedJSONParser(BaseParser):
    """JSON, at most ``MAX_BODY_BYTES`` (a JSON 413 past it), strictly (no ``NaN``)."""

    media_type = "application/json"
    renderer_class = renderers.JSONRenderer
    #: Refuse strings holding lone surrogates here (a door that must first read
    #: something of the body, as MCP reads the request's id, checks them itself).
    refuse_surrogates = True

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        parser_context = parser_context or {}
        limit = memoryhub_settings.MAX_BODY_BYTES
        request = parser_context.get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        try:
            if declared and int(declared) > limit:
                raise _too_large(limit)
        except ValueError:
            pass
        body = stream.read(limit + 1) if stream is not None else b""
        if len(body) > limit:
            raise _too_large(limit)
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        try:
            "".encode(encoding)  # text codecs only: bz2_codec would inflate the body
            data = json.loads(body.decode(encoding), object_pairs_hook=boundary.unique_keys)
        except (LookupError, UnicodeError) as exc:
            raise exceptions.ParseError(f"The body is not {encoding} text: {exc}") from None
        except RecursionError:
            raise exceptions.ParseError("JSON parse error - nested too deeply.") from None
        except ValueError as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None
        path = boundary.surrogate_path(data) if self.refuse_surrogates else None
        if path is not None:
            raise exceptions.ValidationError({path: [boundary.UNPAIRED_SURROGATE]})
        return data
