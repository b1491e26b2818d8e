"""A stopped flow's offsets (Kafka Connect's offsets API) and its checkpoints."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.generics import ListAPIView
from rest_framework.response import Response

from dataflow.api.schema import errors
from dataflow.api.serializers import CheckpointSerializer, OffsetsSerializer, OffsetsUpdateSerializer
from dataflow.api.views.base import FlowScopedView
from dataflow.models import Checkpoint, DataFlow
from dataflow.selectors.runs import flow_latest_run
from dataflow.services.checkpoints import checkpoints_of
from dataflow.services.offsets import offsets_of, offsets_reset, offsets_set


def _offsets(flow: DataFlow, offsets: list[dict]) -> dict:
    run = flow_latest_run(flow=flow)
    return {"flow": flow.name, "run": run.pk if run else None, "offsets": offsets}


class FlowOffsetsView(FlowScopedView):
    serializer_class = OffsetsSerializer

    @extend_schema(
        summary="Each split of the latest run: where it is (also in the source's words)",
        responses={200: OffsetsSerializer, **errors(400, 404)},
    )
    def get(self, request, name: str):
        flow = self.get_flow()
        return Response(OffsetsSerializer(_offsets(flow, offsets_of(flow=flow))).data)

    @extend_schema(
        summary="Move splits of a stopped flow to new offsets (409 while it runs)",
        request=OffsetsUpdateSerializer,
        responses={200: OffsetsSerializer, **errors(400, 403, 404, 409, 413, 429)},
    )
    def patch(self, request, name: str):
        flow = self.get_flow()
        body = OffsetsUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        offsets = offsets_set(flow=flow, positions=body.validated_data["offsets"])
        return Response(OffsetsSerializer(_offsets(flow, offsets)).data)


@extend_schema(
    summary="Forget a stopped flow's offsets: its next run reads from source.start (409 while it runs)",
    request=None,
    responses={200: OffsetsSerializer, **errors(400, 403, 404, 409, 429)},
)
class FlowOffsetsResetView(FlowScopedView):
    serializer_class = OffsetsSerializer

    def post(self, request, name: str):
        flow = self.get_flow()
        offsets_reset(flow=flow)
        return Response(OffsetsSerializer(_offsets(flow, offsets_of(flow=flow))).data)


@extend_schema(
    summary="A flow's checkpoints, newest first",
    responses={200: CheckpointSerializer(many=True), **errors(404)},
)
class FlowCheckpointsView(FlowScopedView, ListAPIView):
    serializer_class = CheckpointSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator: no request
            return Checkpoint.objects.none()
        return checkpoints_of(flow=self.get_flow())
