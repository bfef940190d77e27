"""The API's site-wide views: health, who am I, and the JSON 404 of every unknown path."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import (
    extend_schema,
    inline_serializer,
)
from rest_framework import exceptions, serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from ...services import health as health_service
from ..authentication import request_api_key
from .base import MemoryAPIView, PinnedAPIView, errors_except

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


class NotFoundView(PinnedAPIView):
    """Any other path under the API: a JSON 404 (never Django's HTML page)."""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]
    schema = None

    def _not_found(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        raise exceptions.NotFound("No such API endpoint.", code="not_found")

    get = post = put = patch = delete = head = options = _not_found  # type: ignore[assignment]
