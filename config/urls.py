"""URLs of the runnable site: admin, the probes, the API, its schema and Swagger UI, the MCP
endpoint."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    path("", include("memoryhub.probes")),
    path("api/v1/", include("memoryhub.api.urls")),
    path("mcp/", include("memoryhub.mcp.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's start-up script as a file: no inline script, so
    # the site's Content-Security-Policy needs no exception for it.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="swagger-ui"),
]
