"""URLs of the REST API; include under ``api/v1/``."""

from django.urls import path, re_path

from . import schema, views  # noqa: F401  (schema registers the auth extension)

app_name = "memoryhub-api"

urlpatterns = [
    path("health", views.HealthView.as_view(), name="health"),
    path("whoami", views.WhoAmIView.as_view(), name="whoami"),
    path("domains/<slug:domain>/records", views.RecordsView.as_view(), name="records"),
    path(
        "domains/<slug:domain>/records/<str:record_id>",
        views.RecordDetailView.as_view(),
        name="record",
    ),
    path(
        "domains/<slug:domain>/records/<str:record_id>/history",
        views.RecordHistoryView.as_view(),
        name="record-history",
    ),
    path(
        "domains/<slug:domain>/records/<str:record_id>/timeline",
        views.RecordTimelineView.as_view(),
        name="record-timeline",
    ),
    path("domains/<slug:domain>/query", views.QueryView.as_view(), name="query"),
    path("domains/<slug:domain>/forget", views.ForgetView.as_view(), name="forget"),
    path("domains/<slug:domain>/export", views.SubjectExportView.as_view(), name="export"),
    path("domains/<slug:domain>/namespaces", views.NamespacesView.as_view(), name="namespaces"),
    path("domains/<slug:domain>/sources", views.SourcesView.as_view(), name="sources"),
    path(
        "domains/<slug:domain>/erasures/<str:receipt_id>",
        views.ErasureReceiptView.as_view(),
        name="erasure",
    ),
    # [\s\S], not ".": a path holding a line break is an API path too (a JSON 404).
    re_path(r"^[\s\S]*$", views.NotFoundView.as_view(), name="not-found"),
]
