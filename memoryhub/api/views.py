"""REST API views. Thin: parse, call one service, shape the response."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DatabaseError
from django.utils.module_loading import import_string
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import exceptions, serializers, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.metadata import SimpleMetadata
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import AllowAny
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import boundary, log, policy, routing, vocabulary
from ..cache import canonical_json
from ..conf import memoryhub_settings
from ..exceptions import ReceiptNotFound, RecordNotFound
from ..models import MemoryRecord
from ..scope import Scope
from ..services import forget as forget_service
from ..services import health as health_service
from ..services import history as history_service
from ..services import idempotency, supersession, updates
from ..services import indexing as indexing_service
from ..services import query as query_service
from ..services import records as records_service
from ..services import write as write_service
from . import schema
from . import serializers as s
from .authentication import ApiKeyAuthentication, request_api_key
from .exceptions import exception_handler
from .parsers import BoundedJSONParser, read_chunked_body
from .permissions import IsApiKeyOrStaff, request_principal, resolve_domain
from .throttling import ApiKeyRateThrottle

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


def _sender(request: Request) -> str:
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
        _sender(request),
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


HealthSerializer = inline_serializer(
    "Health",
    {
        "status": serializers.ChoiceField(choices=["ok", "degraded"]),
        "database": serializers.DictField(),
        "broker": serializers.DictField(),
        "embedder": serializers.DictField(
            help_text="name, dimensions; previous_models and migrating during a change of "
            "embedder (records still on a previous model's vectors, which keep serving)."
        ),
        "indexing": serializers.DictField(
            help_text="mode, pending, pending_capped, oldest_pending_seconds; with a broker "
            "also worker_seen_at and worker_seen_seconds_ago (the workers' heartbeat)."
        ),
    },
)


class HealthView(PinnedAPIView):
    """Public liveness and readiness: database, broker, embedder and indexing.

    503 when the database, broker or embedder fails (this node cannot serve); 200 with
    ``status: degraded`` when only indexing is stuck (no worker seen while records
    wait): queries still work, and pulling every web node out of a load balancer
    because a worker died would turn a backlog into an outage.
    """

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]

    @extend_schema(responses={200: HealthSerializer, 503: HealthSerializer}, auth=[])
    def get(self, request: Request) -> Response:
        report, serving = health_service.report()
        return Response(
            report, status=status.HTTP_200_OK if serving else status.HTTP_503_SERVICE_UNAVAILABLE
        )


WhoAmISerializer = inline_serializer(
    "WhoAmI",
    {
        "org": serializers.CharField(),
        "domain": serializers.CharField(allow_null=True),
        "permissions": serializers.ListField(child=serializers.CharField()),
        "key": inline_serializer(
            "WhoAmIKey",
            {
                "name": serializers.CharField(),
                "prefix": serializers.CharField(),
                "expires_at": serializers.DateTimeField(allow_null=True),
            },
        ),
    },
)


class WhoAmIView(MemoryAPIView):
    """The org, domain and permissions of the calling API key."""

    @extend_schema(responses={200: WhoAmISerializer, **errors_except(400, 404, 413)})
    def get(self, request: Request) -> Response:
        api_key = request_api_key(request)
        if api_key is None:
            raise exceptions.PermissionDenied(
                "whoami describes an API key.", code="api_key_required"
            )
        return Response(
            {
                "org": api_key.org.slug,
                "domain": api_key.domain.slug if api_key.domain is not None else None,
                "permissions": api_key.permissions,
                "key": {
                    "name": api_key.name,
                    "prefix": api_key.prefix,
                    "expires_at": api_key.expiry_date,
                },
            }
        )


#: A number as a query parameter: ASCII digits, with a decimal point for a fraction.
DECIMAL = re.compile(r"[0-9]+(\.[0-9]+)?")
WHOLE = re.compile(r"[0-9]+")


class RecordCursor(CursorPagination):
    ordering = records_service.LIST_ORDERINGS["created"]
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def get_page_size(self, request: Any) -> int:
        """``page_size`` when given (a whole number from 1, ASCII digits; more than
        ``max_page_size`` is that many), else the default. DRF's own quietly answers the
        default page for ``abc``, ``0`` or ``1e3``: a 400 naming it here."""
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not WHOLE.fullmatch(raw) or int(raw) < 1:
            raise exceptions.ValidationError(
                {self.page_size_query_param: ["must be a whole number from 1."]}
            )
        return min(int(raw), self.max_page_size)

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> Any:
        # DRF decodes a cursor's position without checking it is a date-time; a forged
        # one (base64 of "p=2024") must be a 404 like any other invalid cursor.
        try:
            return super().paginate_queryset(queryset, request, view)
        except (DjangoValidationError, OverflowError):
            raise exceptions.NotFound(self.invalid_cursor_message) from None


class RecordsView(MemoryAPIView):
    """Write memory (POST) and list records (GET)."""

    @extend_schema(
        summary="Write memory",
        operation_id="records_write",
        parameters=[
            DOMAIN,
            IDEMPOTENCY_KEY,
            OpenApiParameter(
                "wait",
                OpenApiTypes.NUMBER,
                description="Seconds (bounded) to wait until the records are indexed.",
            ),
        ],
        request=vocabulary.WriteRequestSerializer,
        responses={
            200: OpenApiResponse(
                s.WriteResponseSerializer, description="Written and indexed (?wait)."
            ),
            202: OpenApiResponse(s.WriteResponseSerializer, description="Accepted; indexing."),
            **errors_except(),
            **KEY_REUSED,
            403: OpenApiResponse(
                s.WriteRefusedSerializer,
                description="A read-only knowledge base refused the write.",
            ),
        },
        examples=schema.WRITE_EXAMPLES,
    )
    def post(self, request: Request, domain: str) -> Response:
        scope = resolve_domain(request, domain, Action.WRITE)
        body = self.body(request)
        wait = _wait_seconds(request)

        def write() -> Response:
            result = write_service.write_body(scope, body, principal=request_principal(request))
            return Response(
                {
                    "accepted": result.accepted,
                    "refused": result.refused,
                    "failed": result.failed,
                    "records": [s.record_result(record) for record in result.records],
                },
                status=status.HTTP_202_ACCEPTED,
            )

        response = answered_once(self, request, scope, write)
        records = response.data.get("records") if response.status_code == 202 else None
        if not wait or not records or response.has_header("Idempotent-Replayed"):
            return response
        # Waited for once the write committed (a worker cannot index it before).
        outcome = indexing_service.wait_for_write(scope, [r["id"] for r in records], wait)
        records = [{**r, "status": outcome.statuses.get(r["id"], r["status"])} for r in records]
        reason = {"pending_reason": outcome.reason} if outcome.reason else {}
        waited = Response(
            {**response.data, "records": records, **reason},
            status=status.HTTP_200_OK if outcome.done else status.HTTP_202_ACCEPTED,
        )
        key = request.headers.get(idempotency.HEADER)
        if key is not None:
            idempotency.replace_answer(
                scope, _sender(request), key, idempotency.Answer(waited.status_code, waited.data)
            )
        return waited

    @extend_schema(
        summary="List records",
        operation_id="records_list",
        parameters=[
            DOMAIN,
            *(
                OpenApiParameter(name, OpenApiTypes.STR, description=f"Filter by {name}.")
                for name in records_service.LIST_FILTERS
            ),
            OpenApiParameter(
                "where",
                OpenApiTypes.STR,
                description='A metadata filter in the where language, as JSON: {"team": '
                '"billing"} (URL-encoded), as a query takes it.',
            ),
            OpenApiParameter(
                "ordering",
                OpenApiTypes.STR,
                enum=list(records_service.LIST_ORDERINGS),
                description="Newest first by creation (created, the default) or by last "
                "update (updated).",
            ),
            OpenApiParameter("cursor", OpenApiTypes.STR),
            OpenApiParameter("page_size", OpenApiTypes.INT),
        ],
        responses={
            200: inline_serializer(
                "RecordPage",
                {
                    "next": serializers.URLField(allow_null=True),
                    "previous": serializers.URLField(allow_null=True),
                    "results": s.RecordSerializer(many=True),
                },
            ),
            **errors_except(413),
        },
    )
    def get(self, request: Request, domain: str) -> Response:
        scope = resolve_domain(request, domain, Action.READ)
        filters = {
            name: value
            for name, value in request.query_params.items()
            if name not in ("cursor", "page_size", "org", "format", "ordering")
        }
        ordering = request.query_params.get("ordering", "created")
        where = _where_parameter(request.query_params.get("where"))
        filters.pop("where", None)
        records = records_service.list_records(scope, filters, ordering=ordering, where=where)
        paginator = RecordCursor()
        paginator.ordering = records_service.LIST_ORDERINGS[ordering]
        page = paginator.paginate_queryset(records, request, view=self)
        return paginator.get_paginated_response(s.RecordSerializer(page, many=True).data)


def _where_parameter(raw: str | None) -> Any:
    """The ``where`` query parameter's JSON (the service says what is wrong with it)."""
    if raw is None:
        return None
    try:
        where = boundary.loads(raw)
    except ValueError as exc:
        raise exceptions.ValidationError({"where": [f"must be a JSON object: {exc}."]}) from None
    path = boundary.surrogate_path(where)
    if path is not None:
        raise exceptions.ValidationError({"where": [f"{path}: {boundary.UNPAIRED_SURROGATE}"]})
    return where


NamespacePageSerializer = inline_serializer(
    "NamespacePage",
    {
        "results": inline_serializer(
            "NamespaceRow",
            {
                "namespace": serializers.CharField(),
                "key_prefix": serializers.CharField(
                    required=False, help_text="With delimiter: the key directory."
                ),
            },
            many=True,
        ),
        "next": serializers.CharField(
            allow_null=True, help_text="The cursor of the next page; null: complete."
        ),
    },
)


class NamespacesView(MemoryAPIView):
    """The namespaces of a knowledge base (or their key directories), page by page."""

    @extend_schema(
        summary="List namespaces",
        operation_id="namespaces_list",
        parameters=[DOMAIN, vocabulary.NamespaceListSerializer],
        responses={200: NamespacePageSerializer, **errors_except(413)},
    )
    def get(self, request: Request, domain: str) -> Response:
        scope = resolve_domain(request, domain, Action.READ)
        raw = {
            name: value
            for name, value in request.query_params.items()
            if name not in ("format", "org")
        }
        page = records_service.list_namespaces(scope, raw)
        return Response({"results": page.rows, "next": page.next})


def _wait_seconds(request: Request) -> float:
    raw = request.query_params.get("wait")
    if raw is None:
        return 0.0
    # ASCII digits only: Python's float() also reads "1_0", "1e1", "inf" and other
    # scripts' digits, none of which a client means as seconds.
    if not DECIMAL.fullmatch(raw):
        raise exceptions.ValidationError({"wait": ["must be a number of seconds."]})
    wait = float(raw)
    maximum = memoryhub_settings.MAX_WAIT_SECONDS
    if not 0 <= wait <= maximum:
        raise exceptions.ValidationError({"wait": [f"must be between 0 and {maximum} seconds."]})
    return wait


class RecordDetailView(MemoryAPIView):
    """One record: read, replace, patch, delete."""

    @extend_schema(
        summary="Get a record",
        operation_id="records_get",
        parameters=[DOMAIN],
        responses={200: s.RecordSerializer, **errors_except(400, 413)},
    )
    def get(self, request: Request, domain: str, record_id: str) -> Response:
        scope = resolve_domain(request, domain, Action.READ)
        record = _get_or_404(scope, record_id)
        return Response(s.RecordSerializer(record).data)

    def _update(self, request: Request, domain: str, record_id: str, partial: bool) -> Response:
        scope = resolve_domain(request, domain, Action.UPDATE)
        changes = self.body(request)

        def update() -> Response:
            updated = updates.update_record_for(
                scope, record_id, changes, partial=partial, principal=request_principal(request)
            )
            if updated.record is None:
                return Response({"id": updated.id, "status": updated.status})
            return Response(s.RecordSerializer(updated.record).data)

        return answered_once(self, request, scope, update)

    @extend_schema(
        summary="Replace a record's content and fields",
        parameters=[DOMAIN, IDEMPOTENCY_KEY],
        request=vocabulary.RecordUpdateSerializer,
        responses={200: UPDATED, **errors_except(), **KEY_REUSED},
    )
    def put(self, request: Request, domain: str, record_id: str) -> Response:
        return self._update(request, domain, record_id, partial=False)

    @extend_schema(
        summary="Change some of a record's fields",
        parameters=[DOMAIN, IDEMPOTENCY_KEY],
        request=vocabulary.RecordUpdateSerializer,
        responses={200: UPDATED, **errors_except(), **KEY_REUSED},
    )
    def patch(self, request: Request, domain: str, record_id: str) -> Response:
        return self._update(request, domain, record_id, partial=True)

    @extend_schema(
        summary="Forget a record",
        parameters=[DOMAIN, IDEMPOTENCY_KEY],
        responses={200: s.ForgetResponseSerializer, **errors_except(413), **KEY_REUSED},
    )
    def delete(self, request: Request, domain: str, record_id: str) -> Response:
        scope = resolve_domain(request, domain, Action.FORGET)

        def forget() -> Response:
            try:
                result = forget_service.forget_record(
                    scope, record_id, principal=request_principal(request)
                )
            except RecordNotFound:
                raise exceptions.NotFound("No such record.", code="record_not_found") from None
            return Response(s.forget_result(result))

        return answered_once(self, request, scope, forget)


class RecordHistoryView(MemoryAPIView):
    """A record's history: its current state and the previous ones, newest first."""

    @extend_schema(
        summary="Get a record's history",
        parameters=[DOMAIN],
        responses={200: s.RecordHistorySerializer, **errors_except(400, 413)},
    )
    def get(self, request: Request, domain: str, record_id: str) -> Response:
        scope = resolve_domain(request, domain, Action.READ)
        try:
            found = history_service.history(scope, record_id)
        except RecordNotFound:
            raise exceptions.NotFound("No such record.", code="record_not_found") from None
        return Response(s.RecordHistorySerializer(found).data)


class RecordTimelineView(MemoryAPIView):
    """A fact's timeline: what it superseded and what superseded it, oldest first."""

    @extend_schema(
        summary="Get a record's timeline",
        parameters=[DOMAIN],
        responses={200: s.TimelineSerializer, **errors_except(400, 413)},
    )
    def get(self, request: Request, domain: str, record_id: str) -> Response:
        scope = resolve_domain(request, domain, Action.READ)
        try:
            links = supersession.timeline(scope, record_id)
        except RecordNotFound:
            raise exceptions.NotFound("No such record.", code="record_not_found") from None
        return Response(s.TimelineSerializer({"record": record_id, "links": links}).data)


def _get_or_404(scope: Any, record_id: str) -> MemoryRecord:
    try:
        return records_service.get_record(scope, record_id)
    except RecordNotFound:
        raise exceptions.NotFound("No such record.", code="record_not_found") from None


class QueryView(MemoryAPIView):
    """Query memory: vector, keyword or hybrid search, with filters and grounding."""

    @extend_schema(
        summary="Query memory",
        parameters=[DOMAIN],
        request=vocabulary.QueryRequestSerializer,
        responses={200: s.QueryResponseSerializer, **errors_except()},
        examples=schema.QUERY_EXAMPLES,
    )
    def post(self, request: Request, domain: str) -> Response:
        scope = resolve_domain(request, domain, Action.READ)
        body = self.body(request)
        output = body.pop("format", "items")
        if output not in vocabulary.FORMATS:
            raise exceptions.ValidationError(
                {"format": [f"must be {' or '.join(vocabulary.FORMATS)}."]}
            )
        result = query_service.query(scope, **body)
        return Response(s.query_result(result))


class ForgetView(MemoryAPIView):
    """Forget (GDPR Art. 17): by namespace, key, source, or the whole domain with all=true."""

    @extend_schema(
        summary="Forget memory",
        parameters=[DOMAIN, IDEMPOTENCY_KEY],
        request=vocabulary.ForgetRequestSerializer,
        responses={200: s.ForgetResponseSerializer, **errors_except(), **KEY_REUSED},
        examples=schema.FORGET_EXAMPLES,
    )
    def post(self, request: Request, domain: str) -> Response:
        scope = resolve_domain(request, domain, Action.FORGET)
        forget_request = forget_service.ForgetRequest.from_body(self.body(request))

        def forget() -> Response:
            result = forget_service.forget(
                scope, forget_request, principal=request_principal(request)
            )
            return Response(s.forget_result(result))

        return answered_once(self, request, scope, forget)


class ErasureReceiptView(MemoryAPIView):
    """One erasure's permanent receipt (keys with the forget permission)."""

    @extend_schema(
        summary="Get an erasure receipt",
        parameters=[DOMAIN],
        responses={200: s.ErasureReceiptSerializer, **errors_except(400, 413)},
    )
    def get(self, request: Request, domain: str, receipt_id: str) -> Response:
        scope = resolve_domain(request, domain, Action.FORGET)
        try:
            receipt = forget_service.get_receipt(scope, receipt_id)
        except ReceiptNotFound:
            raise exceptions.NotFound("No such receipt.", code="receipt_not_found") from None
        return Response(receipt.as_json())


class SourcesView(MemoryAPIView):
    """The domain's knowledge bases with their policies and record counts."""

    @extend_schema(
        summary="List knowledge bases",
        parameters=[DOMAIN],
        responses={200: s.SourceSerializer(many=True), **errors_except(400, 413)},
    )
    def get(self, request: Request, domain: str) -> Response:
        scope = resolve_domain(request, domain, Action.READ)
        return Response(records_service.summarize_sources(scope))


class NotFoundView(PinnedAPIView):
    """Any other path under the API: a JSON 404 (never Django's HTML page)."""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]
    schema = None

    def _not_found(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        raise exceptions.NotFound("No such API endpoint.", code="not_found")

    get = post = put = patch = delete = head = options = _not_found  # type: ignore[assignment]
