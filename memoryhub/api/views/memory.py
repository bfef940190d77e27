"""Query and forget over REST, an erasure's receipt, and the domain's knowledge bases."""

from __future__ import annotations

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
)
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response

from tenants.models import Domain

from ... import vocabulary
from ...exceptions import ReceiptNotFound
from ...services import forget as forget_service
from ...services import query as query_service
from ...services import records as records_service
from ...services import subjects
from .. import schema
from .. import serializers as s
from ..permissions import request_principal, resolve_domain
from .base import (
    DOMAIN,
    IDEMPOTENCY_KEY,
    KEY_REUSED,
    Action,
    MemoryAPIView,
    answered_once,
    errors_except,
)


class QueryView(MemoryAPIView):
    """Query memory: vector, keyword or hybrid search, with filters and grounding."""

    @extend_schema(
        summary="Query memory",
        parameters=[DOMAIN],
        request=vocabulary.QueryBody,
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
        request=vocabulary.ForgetBody,
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


class SubjectExportView(MemoryAPIView):
    """A data subject's access export (GDPR Art. 15 and 20): keys with the export
    permission."""

    @extend_schema(
        summary="Export a data subject",
        parameters=[DOMAIN],
        request=vocabulary.SubjectExportBody,
        responses={
            200: OpenApiResponse(
                OpenApiTypes.OBJECT,
                description="One JSON document, streamed: subject, org, domains,"
                " exported_at, records (every stored field, links and earlier states),"
                " derived_elsewhere (facts derived from their records in other"
                " namespaces), erasures (receipts of their namespace), counts.",
            ),
            **errors_except(),
        },
    )
    def post(self, request: Request, domain: str) -> StreamingHttpResponse:
        scope = resolve_domain(request, domain, Action.EXPORT)
        body = self.body(request)
        unknown = sorted(set(body) - {"namespace"}, key=str)
        if unknown:
            raise exceptions.ValidationError(
                {str(name): [vocabulary.SubjectExportBody.unknown] for name in unknown}
            )
        pieces = subjects.access_export(
            [Domain.objects.select_related("org").get(pk=scope.domain_id)],
            body.get("namespace"),
            principal=request_principal(request),
        )
        response = StreamingHttpResponse(pieces, content_type="application/json")
        response["Content-Disposition"] = 'attachment; filename="subject-export.json"'
        return response
