"""The API's URLs, under ``api/`` of the app's (see dataflow/urls.py)."""

from __future__ import annotations

from django.http import JsonResponse
from django.urls import path, re_path, reverse
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import SimpleRouter

from dataflow.api.views import actions, auth, catalog, dead_letters, offsets, preview, runs, slots
from dataflow.api.views.connections import ConnectionViewSet
from dataflow.api.views.flows import FlowViewSet

app_name = "api"

router = SimpleRouter()
router.register("flows", FlowViewSet, basename="flow")
router.register("connections", ConnectionViewSet, basename="connection")


def endpoint_not_found(request) -> JsonResponse:
    """A path under the API's that is no endpoint: JSON for API clients, not an HTML page."""
    docs = reverse("dataflow:api:docs")
    return JsonResponse(
        {"detail": f"no endpoint at {request.path}; the endpoints are listed at {docs}"}, status=404
    )


urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves its start-up script as a file: no inline script (CSP); the
    # page's style is a file too (dataflow/swagger_ui.html).
    path(
        "docs/",
        SpectacularSwaggerSplitView.as_view(
            url_name="dataflow:api:schema", template_name="dataflow/swagger_ui.html"
        ),
        name="docs",
    ),
    path("auth/token/", auth.TokenView.as_view(), name="token"),
    path("connectors/", catalog.ConnectorCatalogView.as_view(), name="connectors"),
    path("slots/", slots.SlotsView.as_view(), name="slots"),
    path("connectors/<slug:type>/test/", preview.ConnectorTestView.as_view(), name="connector-test"),
    # before the router's: "preview" is no flow's name (specs.RESERVED_NAMES)
    path("flows/preview/", preview.FlowPreviewView.as_view(), name="flow-preview-spec"),
    *router.urls,
    path("flows/<slug:name>/preview/", preview.FlowNamedPreviewView.as_view(), name="flow-preview"),
    path("connections/<slug:name>/test/", preview.ConnectionTestView.as_view(), name="connection-test"),
    path("flows/<slug:name>/start/", actions.FlowStartView.as_view(), name="flow-start"),
    path("flows/<slug:name>/stop/", actions.FlowStopView.as_view(), name="flow-stop"),
    path("flows/<slug:name>/pause/", actions.FlowPauseView.as_view(), name="flow-pause"),
    path("flows/<slug:name>/resume/", actions.FlowResumeView.as_view(), name="flow-resume"),
    path("flows/<slug:name>/restart/", actions.FlowRestartView.as_view(), name="flow-restart"),
    path("flows/<slug:name>/restore/", actions.FlowRestoreView.as_view(), name="flow-restore"),
    path("flows/<slug:name>/status/", runs.FlowStatusView.as_view(), name="flow-status"),
    path("flows/<slug:name>/metrics/", runs.FlowMetricsView.as_view(), name="flow-metrics"),
    path("flows/<slug:name>/runs/", runs.FlowRunsView.as_view(), name="flow-runs"),
    path(
        "flows/<slug:name>/dead-letters/",
        dead_letters.FlowDeadLettersView.as_view(),
        name="flow-dead-letters",
    ),
    path(
        "flows/<slug:name>/dead-letters/discard/",
        dead_letters.FlowDeadLettersDiscardView.as_view(),
        name="flow-dead-letters-discard",
    ),
    path(
        "flows/<slug:name>/dead-letters/replay/",
        dead_letters.FlowDeadLettersReplayView.as_view(),
        name="flow-dead-letters-replay",
    ),
    path("flows/<slug:name>/offsets/", offsets.FlowOffsetsView.as_view(), name="flow-offsets"),
    path(
        "flows/<slug:name>/offsets/reset/", offsets.FlowOffsetsResetView.as_view(), name="flow-offsets-reset"
    ),
    path("flows/<slug:name>/checkpoints/", offsets.FlowCheckpointsView.as_view(), name="flow-checkpoints"),
    path("runs/<int:pk>/", runs.RunDetailView.as_view(), name="run-detail"),
    path("dead-letters/<int:pk>/", dead_letters.DeadLetterDetailView.as_view(), name="dead-letter-detail"),
    re_path(r"^", endpoint_not_found, name="not-found"),
]
