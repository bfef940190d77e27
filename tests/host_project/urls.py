from django.contrib import admin
from django.http import HttpResponse
from django.urls import include, path

urlpatterns = [
    path("", lambda request: HttpResponse("the monolith's own home page")),
    path("backoffice/", admin.site.urls),
    path("memory/api/v1/", include("memoryhub.api.urls")),
]
