"""An orchestrator's probes, for a site to include at its root::

    path("", include("memoryhub.probes")),

``GET /livez``: the process answers (200, nothing asked of anything else). ``GET
/readyz``: 200 when the deployment is ready, else 503 with ``Retry-After``; both with
each check by name (``services.health.readiness``). Neither needs a key, counts against
the API's throttle, nor says more than a check's name, state and the error's class.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from .services import health

__all__ = ["livez", "readyz", "urlpatterns"]

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


urlpatterns = [
    path("livez", livez, name="memoryhub-livez"),
    path("readyz", readyz, name="memoryhub-readyz"),
]
