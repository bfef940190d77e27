"""REST API views. Thin: parse, call one service, shape the response."""

from __future__ import annotations

from typing import Any

from celery import current_app
from django.db import connection
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ..conf import memoryhub_settings
from .authentication import request_api_key


def _database_status() -> dict[str, Any]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            row = cursor.fetchone()
    except Exception as exc:
        return {"ok": False, "error": type(exc).__name__}
    return {"ok": row is not None, "vendor": connection.vendor, "pgvector": row and row[0]}


def _broker_status() -> dict[str, Any]:
    if current_app.conf.task_always_eager:
        return {"ok": True, "mode": "eager"}
    try:
        with current_app.connection_for_write() as broker:
            broker.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:
        return {"ok": False, "mode": "broker", "error": type(exc).__name__}
    return {"ok": True, "mode": "broker"}


def _embedder_status() -> dict[str, Any]:
    try:
        embedder = memoryhub_settings.embedder()
    except Exception as exc:
        return {"ok": False, "error": type(exc).__name__}
    return {"ok": True, "name": embedder.name, "dimensions": embedder.dimensions}


HealthSerializer = inline_serializer(
    "Health",
    {
        "status": serializers.ChoiceField(choices=["ok", "degraded"]),
        "database": serializers.DictField(),
        "broker": serializers.DictField(),
        "embedder": serializers.DictField(),
    },
)


class HealthView(APIView):
    """Public liveness and readiness: database, broker and embedder."""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]

    @extend_schema(responses={200: HealthSerializer, 503: HealthSerializer}, auth=[])
    def get(self, request: Request) -> Response:
        checks = {
            "database": _database_status(),
            "broker": _broker_status(),
            "embedder": _embedder_status(),
        }
        healthy = all(check["ok"] for check in checks.values())
        return Response(
            {"status": "ok" if healthy else "degraded", **checks},
            status=status.HTTP_200_OK if healthy else status.HTTP_503_SERVICE_UNAVAILABLE,
        )


WhoAmISerializer = inline_serializer(
    "WhoAmI",
    {
        "org": serializers.CharField(),
        "domain": serializers.CharField(allow_null=True),
        "permissions": serializers.ListField(child=serializers.CharField()),
        "key": serializers.DictField(),
    },
)


class WhoAmIView(APIView):
    """The org, domain and permissions of the calling API key."""

    permission_classes = [IsAuthenticated]

    @extend_schema(responses={200: WhoAmISerializer})
    def get(self, request: Request) -> Response:
        api_key = request_api_key(request)
        if api_key is None:
            return Response(
                {"code": "api_key_required", "detail": "whoami describes an API key."},
                status=status.HTTP_403_FORBIDDEN,
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
