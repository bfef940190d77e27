"""The MCP endpoint; include under ``mcp/``."""

from django.urls import path

from . import views

app_name = "memoryhub-mcp"

urlpatterns = [path("", views.McpView.as_view(), name="endpoint")]
