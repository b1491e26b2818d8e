"""A project's URL map with the app under a prefix and its admin elsewhere, as a project
that installs the app may have it (docs/install-into-your-project.md)."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("backoffice/", admin.site.urls),
    path("flows/", include("dataflow.urls")),
]
