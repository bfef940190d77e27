"""What a platform team's tools ask of a site, for the site to include at its root::

    path("", include("memoryhub.probes")),

``GET /livez``: the process answers (200, nothing asked of anything else). ``GET
/readyz``: 200 when the deployment is ready, else 503 with ``Retry-After``, with each
check by name (``services.health.readiness``). ``GET /metrics``: Prometheus's text format
(``memoryhub.metrics``), for the bearer token ``METRICS_TOKEN`` or, unset, for loopback
addresses only. None needs an API key or counts against the API's throttle.
"""

from __future__ import annotations

import hmac

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from . import metrics as metrics_module
from .conf import memoryhub_settings
from .services import health

__all__ = ["livez", "metrics", "readyz", "urlpatterns"]

#: The addresses that may scrape /metrics when no token is set.
LOOPBACK = frozenset({"127.0.0.1", "::1"})

#: What a 503 asks a prober to wait before it asks again, in seconds.
RETRY_AFTER = 5


@never_cache
@require_safe
def livez(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "alive"})


@never_cache
@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    report, ready = health.readiness()
    response = JsonResponse(report, status=200 if ready else 503)
    if not ready:
        response["Retry-After"] = str(RETRY_AFTER)
    return response


def _refusal(request: HttpRequest) -> HttpResponse | None:
    token = memoryhub_settings.METRICS_TOKEN
    if not token:
        # A proxy on the same host makes every client loopback: what it forwarded is not.
        forwarded = "HTTP_X_FORWARDED_FOR" in request.META or "HTTP_FORWARDED" in request.META
        if request.META.get("REMOTE_ADDR") in LOOPBACK and not forwarded:
            return None
        return JsonResponse(
            {"detail": "Set METRICS_TOKEN to scrape from another address."}, status=403
        )
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), str(token).encode()):
        return None
    refused = JsonResponse({"detail": "A bearer token is needed."}, status=401)
    refused["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return refused


@never_cache
@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    refused = _refusal(request)
    if refused is not None:
        return refused
    body = metrics_module.exposition(metrics_module.Deployment(health.state))
    return HttpResponse(body, content_type=metrics_module.CONTENT_TYPE)


urlpatterns = [
    path("livez", livez, name="memoryhub-livez"),
    path("readyz", readyz, name="memoryhub-readyz"),
    path("metrics", metrics, name="memoryhub-metrics"),
]
