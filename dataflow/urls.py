from django.contrib import admin
from django.urls import include, path

from dataflow import monitoring

urlpatterns = [
    path("", include("dataflow.web.urls")),
    path("admin/", admin.site.urls),
    path("api/", include("dataflow.api.urls")),
    path("metrics", monitoring.metrics, name="metrics"),
    path("healthz", monitoring.healthz, name="healthz"),
]
