"""The URL map: the admin, the REST API, the dashboard, ``/metrics`` and ``/healthz``."""

from django.contrib import admin
from django.urls import include, path

from dataflow import monitoring
from dataflow.web import views as dashboard_views

urlpatterns = [
    path("", include("dataflow.web.urls")),
    path("admin/", admin.site.urls),
    path("api/", include("dataflow.api.urls")),
    path("metrics", monitoring.metrics, name="metrics"),
    path("healthz", monitoring.healthz, name="healthz"),
    path("favicon.ico", dashboard_views.favicon, name="favicon"),
]
