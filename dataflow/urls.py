from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from dataflow import monitoring

urlpatterns = [
    # Until a dashboard exists, the admin is the place to start (not Django's "it worked" page).
    path("", RedirectView.as_view(pattern_name="admin:index", permanent=False)),
    path("admin/", admin.site.urls),
    path("api/", include("dataflow.api.urls")),
    path("metrics", monitoring.metrics, name="metrics"),
    path("healthz", monitoring.healthz, name="healthz"),
]
