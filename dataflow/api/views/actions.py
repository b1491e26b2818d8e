"""Actions on a flow: start, stop, pause, resume, restart, restore. Each answers
``{"flow", "run", "status"}`` (the run acted on, the flow's state now), or 409 when the
flow's state does not allow it."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from dataflow.api.schema import errors
from dataflow.api.serializers import ActionSerializer, RestartQuerySerializer, RestoreSerializer
from dataflow.api.views.base import FlowScopedView
from dataflow.models import DataFlow, FlowRun
from dataflow.services.flows import (
    flow_pause,
    flow_restart,
    flow_restore,
    flow_resume,
    flow_start,
    flow_stop_active,
)


class FlowActionView(FlowScopedView):
    """POST: does ``act`` to the flow and answers what it did."""

    serializer_class = ActionSerializer
    success_status = status.HTTP_202_ACCEPTED

    def act(self, flow: DataFlow) -> FlowRun | None:
        raise NotImplementedError

    def post(self, request, name: str):
        flow = self.get_flow()
        run = self.act(flow)
        return Response(
            ActionSerializer((flow, run), context=self.get_serializer_context()).data,
            status=self.success_status,
        )


def _action_schema(summary: str, code: int):
    return extend_schema(
        summary=summary, request=None, responses={code: ActionSerializer, **errors(400, 403, 404, 409, 429)}
    )


@_action_schema("Start a run", 202)
class FlowStartView(FlowActionView):
    def act(self, flow):
        return flow_start(flow=flow)


@_action_schema("Stop the active run (409 if none)", 200)
class FlowStopView(FlowActionView):
    success_status = status.HTTP_200_OK

    def act(self, flow):
        return flow_stop_active(flow=flow)


@_action_schema("Pause the active run's readers", 200)
class FlowPauseView(FlowActionView):
    success_status = status.HTTP_200_OK

    def act(self, flow):
        return flow_pause(flow=flow)


@_action_schema("Resume a paused run, or the latest stopped run from its checkpoints", 202)
class FlowResumeView(FlowActionView):
    def act(self, flow):
        return flow_resume(flow=flow)


@extend_schema(
    summary="Restart: stop the active run and start a new one, or (only_failed) restart failed splits",
    request=None,
    parameters=[RestartQuerySerializer],
    responses={202: ActionSerializer, **errors(400, 403, 404, 409, 429)},
)
class FlowRestartView(FlowActionView):
    def act(self, flow):
        query = RestartQuerySerializer(data=self.request.query_params)
        query.is_valid(raise_exception=True)
        return flow_restart(flow=flow, only_failed=query.validated_data["only_failed"])


@extend_schema(
    summary="Start a new run of a stopped unbounded flow from a checkpoint (the newest by default)",
    request=RestoreSerializer,
    responses={202: ActionSerializer, **errors(400, 403, 404, 409, 413, 429)},
)
class FlowRestoreView(FlowActionView):
    def act(self, flow):
        body = RestoreSerializer(data=self.request.data if self.request.data is not None else {})
        body.is_valid(raise_exception=True)
        return flow_restore(flow=flow, checkpoint_id=body.validated_data.get("checkpoint"))
