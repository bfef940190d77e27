"""The records of a domain over REST: list (cursor pages, filters), write, one record
(read, update, delete), its history and timeline, and the namespaces."""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import exceptions, serializers, status
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response

from ... import boundary, vocabulary
from ...conf import memoryhub_settings
from ...exceptions import RecordNotFound
from ...models import MemoryRecord
from ...services import forget as forget_service
from ...services import history as history_service
from ...services import idempotency, supersession, updates
from ...services import indexing as indexing_service
from ...services import records as records_service
from ...services import write as write_service
from .. import schema
from .. import serializers as s
from ..permissions import request_principal, resolve_domain
from .base import (
    DOMAIN,
    IDEMPOTENCY_KEY,
    KEY_REUSED,
    UPDATED,
    Action,
    MemoryAPIView,
    answered_once,
    errors_except,
    request_sender,
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
        request=vocabulary.WriteBody,
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
                scope,
                request_sender(request),
                key,
                idempotency.Answer(waited.status_code, waited.data),
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
        parameters=[DOMAIN, *schema.query_parameters(vocabulary.NamespaceListing)],
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
        request=vocabulary.RecordUpdate,
        responses={200: UPDATED, **errors_except(), **KEY_REUSED},
    )
    def put(self, request: Request, domain: str, record_id: str) -> Response:
        return self._update(request, domain, record_id, partial=False)

    @extend_schema(
        summary="Change some of a record's fields",
        parameters=[DOMAIN, IDEMPOTENCY_KEY],
        request=vocabulary.RecordUpdate,
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
