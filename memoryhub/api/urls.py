"""URLs of the REST API; include under ``api/v1/``."""

from django.urls import path

from . import views

app_name = "memoryhub-api"

urlpatterns = [
    path("health", views.HealthView.as_view(), name="health"),
    path("whoami", views.WhoAmIView.as_view(), name="whoami"),
]
