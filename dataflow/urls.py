"""The app's URLs, for a project to include under a prefix of its choosing
(``path("flows/", include("dataflow.urls"))``): the dashboard, the REST API (``api/``),
``metrics`` and ``healthz``, all named under the namespace ``dataflow``
(``dataflow:dashboard:index``, ``dataflow:api:flow-list``). The admin is the project's own
(the app registers its models there); the checkout's URL map is ``dataflow.project_urls``."""

from django.urls import include, path

from dataflow import monitoring
from dataflow.web import views as dashboard_views

app_name = "dataflow"

urlpatterns = [
    path("", include("dataflow.web.urls")),
    path("api/", include("dataflow.api.urls")),
    path("metrics", monitoring.metrics, name="metrics"),
    path("healthz", monitoring.healthz, name="healthz"),
    path("favicon.ico", dashboard_views.favicon, name="favicon"),
]
