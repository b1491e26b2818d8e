"""A flow's runs (the timeline), a run, and where a flow is now (status, metrics)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.generics import ListAPIView, RetrieveAPIView
from rest_framework.response import Response

from dataflow.api.schema import errors
from dataflow.api.serializers import (
    FlowStatusSerializer,
    MetricsQuerySerializer,
    MetricsSerializer,
    RunSerializer,
    StatusQuerySerializer,
)
from dataflow.api.views.base import ApiDefaults, FlowScopedView
from dataflow.models import FlowRun
from dataflow.selectors.flows import flow_status_report
from dataflow.selectors.runs import flow_latest_run, metrics_series
from dataflow.selectors.visibility import runs_visible


@extend_schema(
    summary="A flow's runs, newest first", responses={200: RunSerializer(many=True), **errors(404)}
)
class FlowRunsView(FlowScopedView, ListAPIView):
    serializer_class = RunSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator: no request
            return FlowRun.objects.none()
        return self.get_flow().runs.select_related("flow").order_by("-id")


@extend_schema(
    summary="A run, with its counters (live while it runs)", responses={200: RunSerializer, **errors(404)}
)
class RunDetailView(ApiDefaults, RetrieveAPIView):
    serializer_class = RunSerializer

    def get_queryset(self):
        return runs_visible(user=self.request.user)


@extend_schema(
    summary="Where the flow is: its state, latest run, its splits counted by state, and a page "
    "of its splits (?splits_page, ?splits_page_size), each with its state, reader, position, records, lag, error",
    parameters=[StatusQuerySerializer],
    responses={200: FlowStatusSerializer, **errors(400, 404)},
)
class FlowStatusView(FlowScopedView):
    serializer_class = FlowStatusSerializer

    def get(self, request, name: str):
        flow = self.get_flow()
        query = StatusQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return Response(FlowStatusSerializer(flow_status_report(flow=flow, **query.validated_data)).data)


@extend_schema(
    summary="Metric samples of a run (the latest by default) or of one of its splits",
    parameters=[MetricsQuerySerializer],
    responses={200: MetricsSerializer, **errors(400, 404)},
)
class FlowMetricsView(FlowScopedView):
    serializer_class = MetricsSerializer

    def get(self, request, name: str):
        flow = self.get_flow()
        query = MetricsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        run_id = query.validated_data["run"]
        run = flow_latest_run(flow=flow) if run_id is None else flow.runs.filter(pk=run_id).first()
        if run_id is not None and run is None:
            raise NotFound(f"run {run_id} is not a run of flow {flow.name!r}")
        split, since = query.validated_data["split"], query.validated_data["since"]
        series = [] if run is None else metrics_series(run=run, split_id=split, since=since)
        values = {"flow": flow.name, "run": run.pk if run else None, "split": split, "series": series}
        return Response(MetricsSerializer(values).data)
