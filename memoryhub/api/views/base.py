"""What every view of the API shares: the pinned DRF settings a host's own cannot change,
the memory view's scope and principal, error translation, idempotent answers, and the
refusal of NUL characters in parameters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import DatabaseError
from django.utils.module_loading import import_string
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
)
from rest_framework import exceptions
from rest_framework.authentication import SessionAuthentication
from rest_framework.metadata import SimpleMetadata
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.permissions import AllowAny
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ... import log, policy, routing
from ...cache import canonical_json
from ...conf import memoryhub_settings
from ...scope import Scope
from ...services import idempotency
from .. import serializers as s
from ..authentication import ApiKeyAuthentication, request_api_key
from ..exceptions import exception_handler
from ..parsers import BoundedJSONParser, read_chunked_body
from ..permissions import IsApiKeyOrStaff
from ..throttling import ApiKeyRateThrottle

Action = policy.Action


ERRORS = {
    400: OpenApiResponse(s.ErrorSerializer, description="Invalid input; errors name the field."),
    401: OpenApiResponse(
        s.ErrorSerializer, description="Missing, unknown, revoked or expired key."
    ),
    403: OpenApiResponse(s.ErrorSerializer, description="The key lacks the permission."),
    404: OpenApiResponse(s.ErrorSerializer, description="No such domain or record for this key."),
    413: OpenApiResponse(s.ErrorSerializer, description="The body is over MAX_BODY_BYTES."),
    429: OpenApiResponse(s.ErrorSerializer, description="Throttled; see Retry-After."),
}


DOMAIN = OpenApiParameter(
    "domain", OpenApiTypes.STR, OpenApiParameter.PATH, description="Domain slug."
)


UPDATED = OpenApiResponse(
    s.RecordSerializer,
    description="The updated record. A key without the read permission gets only "
    "{id, status}: it never receives content.",
)


def errors_except(*codes: int) -> dict[int, OpenApiResponse]:
    return {code: response for code, response in ERRORS.items() if code not in codes}


class PinnedAPIView(APIView):
    """Every policy of the view is memoryhub's own: a host project's REST_FRAMEWORK
    defaults (authentication, permissions, renderers, pagination, throttles, versioning,
    the exception handler) apply to the host's views and never change this contract."""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]
    throttle_classes: list[type] = []
    parser_classes = [BoundedJSONParser]
    renderer_classes = [JSONRenderer, BrowsableAPIRenderer]
    content_negotiation_class = DefaultContentNegotiation
    metadata_class = SimpleMetadata
    versioning_class = None
    pagination_class = None

    def get_exception_handler(self) -> Any:
        return exception_handler


class MemoryAPIView(PinnedAPIView):
    """Base: API key or staff session, per-key throttle, bounded JSON bodies.

    Requests with a ``replica_methods`` method read memory from a replica when the site
    routes one (``memoryhub.routing``); the caller's org and key prefix go into the
    request's log context (``memoryhub.log``).
    """

    # A host adds authentication classes explicitly: MEMORYHUB["API_AUTHENTICATION_CLASSES"].
    authentication_classes = [ApiKeyAuthentication, SessionAuthentication]
    permission_classes = [IsApiKeyOrStaff]
    throttle_classes = [ApiKeyRateThrottle]
    #: Read-only methods: nothing they do needs to read its own writes.
    replica_methods: frozenset[str] = frozenset({"GET", "HEAD"})

    def get_authenticators(self) -> list[Any]:
        extra = [import_string(path) for path in memoryhub_settings.API_AUTHENTICATION_CLASSES]
        return [cls() for cls in [*self.authentication_classes, *extra]]

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        if request.method not in self.replica_methods:
            return super().dispatch(request, *args, **kwargs)
        with routing.replica_reads():
            return super().dispatch(request, *args, **kwargs)

    def perform_authentication(self, request: Request) -> None:
        try:
            super().perform_authentication(request)
        finally:
            api_key = request_api_key(request)  # None when authentication failed
            if api_key is not None:
                log.bind(org=api_key.org.slug, key_prefix=api_key.prefix)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        _refuse_nul_parameters(request)
        super().initial(request, *args, **kwargs)
        read_chunked_body(request)

    def body(self, request: Request) -> dict[str, Any]:
        data = request.data
        if not isinstance(data, dict):
            raise exceptions.ValidationError(
                {"non_field_errors": ["The body must be a JSON object."]}
            )
        return data


KEY_REUSED = {
    422: OpenApiResponse(
        s.ErrorSerializer,
        description="idempotency_key_reused: the Idempotency-Key was sent before with"
        " another request.",
    )
}


IDEMPOTENCY_KEY = OpenApiParameter(
    idempotency.HEADER,
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="A key of the client's choosing (1 to 255 printable ASCII characters) that"
    " makes a retry safe: a request sent again with the same key within IDEMPOTENCY_TTL gets"
    " the first success answered again (status and body, Idempotent-Replayed: true) instead"
    " of acting twice. The same key with another request is a 422"
    " idempotency_key_reused.",
)


def request_sender(request: Request) -> str:
    """Who sent a request, as idempotency keys are kept per sender: its key, else its user."""
    api_key = request_api_key(request)
    if api_key is not None:
        return f"key:{api_key.prefix}"
    return f"user:{request.user.pk}"


def answered_once(
    view: APIView, request: Request, scope: Scope, act: Callable[[], Response]
) -> Response:
    """``act()``'s response, or with an ``Idempotency-Key`` the first answer to that key
    (``services.idempotency``): the action and its answer commit together, failures the
    API puts into words (a refusal, a 400) commit what they recorded and are not kept."""
    key = request.headers.get(idempotency.HEADER)
    if key is None:
        return act()

    def answer() -> idempotency.Answer:
        try:
            response = act()
        except DatabaseError:
            raise  # the transaction is lost: nothing to answer from inside it
        except Exception as exc:
            failure = exception_handler(exc, {"request": request, "view": view})
            if failure is None or failure.status_code >= 500:
                raise
            response = failure
        return idempotency.Answer(response.status_code, response.data)

    body = request.data if request.method not in ("DELETE",) else None
    answer_ = idempotency.answer_once(
        scope,
        request_sender(request),
        key,
        idempotency.fingerprint(request.method or "", request.path, canonical_json(body).encode()),
        answer,
    )
    response = Response(answer_.body, status=answer_.status)
    if answer_.replayed:
        response["Idempotent-Replayed"] = "true"
    return response


def _refuse_nul_parameters(request: Request) -> None:
    """A NUL character in the query string is a 400 naming the parameter (PostgreSQL
    cannot store or compare it, so it must never reach a query)."""
    bad = sorted(
        name
        for name, values in request.query_params.lists()
        if "\x00" in name or any("\x00" in value for value in values)
    )
    if bad:
        raise exceptions.ValidationError(
            {name.replace("\x00", "\\x00"): ["may not contain NUL characters."] for name in bad}
        )
