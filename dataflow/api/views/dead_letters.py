"""Dead letters: list and read them, discard them, or replay them into the flow's sink."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.generics import ListAPIView, RetrieveDestroyAPIView
from rest_framework.response import Response

from dataflow.api.filters import DeadLetterFilter
from dataflow.api.schema import errors
from dataflow.api.serializers import (
    DeadLettersDiscardedSerializer,
    DeadLetterSelectionSerializer,
    DeadLetterSerializer,
    RunSerializer,
)
from dataflow.api.views.base import WRITE_SCOPE, ApiDefaults, FlowScopedView
from dataflow.models import DeadLetter
from dataflow.selectors.flows import flow_dead_letters
from dataflow.selectors.visibility import dead_letters_visible
from dataflow.services.dead_letters import dead_letters_discard, dead_letters_replay


@extend_schema(
    summary="A flow's dead letters (records that could not be read), oldest first",
    responses={200: DeadLetterSerializer(many=True), **errors(400, 404)},
)
class FlowDeadLettersView(FlowScopedView, ListAPIView):
    serializer_class = DeadLetterSerializer
    filterset_class = DeadLetterFilter

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator: no request
            return DeadLetter.objects.none()
        return flow_dead_letters(flow=self.get_flow())


@extend_schema(summary="A dead letter", responses={200: DeadLetterSerializer, **errors(404)}, methods=["GET"])
@extend_schema(
    summary="Discard a dead letter", responses={204: None, **errors(403, 404, 409, 429)}, methods=["DELETE"]
)
class DeadLetterDetailView(ApiDefaults, RetrieveDestroyAPIView):
    serializer_class = DeadLetterSerializer
    throttle_scope = WRITE_SCOPE
    flow_permissions = {"DELETE": "change"}

    def get_queryset(self):
        return dead_letters_visible(user=self.request.user)

    def destroy(self, request, pk: int):
        letter = self.get_object()
        dead_letters_discard(flow=letter.flow, ids=[letter.pk])
        return Response(status=status.HTTP_204_NO_CONTENT)


class _SelectionView(FlowScopedView):
    serializer_class = DeadLetterSelectionSerializer

    def selection(self) -> dict:
        body = DeadLetterSelectionSerializer(data=self.request.data)
        body.is_valid(raise_exception=True)
        return {"ids": body.validated_data.get("ids"), "run_id": body.validated_data.get("run")}


@extend_schema(
    summary="Discard dead letters: by ids, or all of a run",
    request=DeadLetterSelectionSerializer,
    responses={200: DeadLettersDiscardedSerializer, **errors(400, 403, 404, 409, 413, 429)},
)
class FlowDeadLettersDiscardView(_SelectionView):
    def post(self, request, name: str):
        flow = self.get_flow()
        discarded = dead_letters_discard(flow=flow, **self.selection())
        return Response({"discarded": discarded})


@extend_schema(
    summary="Replay dead letters into the flow's sink (a new run; 202 with the run)",
    request=DeadLetterSelectionSerializer,
    responses={202: RunSerializer, **errors(400, 403, 404, 409, 413, 429)},
)
class FlowDeadLettersReplayView(_SelectionView):
    def post(self, request, name: str):
        flow = self.get_flow()
        run = dead_letters_replay(flow=flow, **self.selection())
        data = RunSerializer(run, context=self.get_serializer_context()).data
        return Response(data, status=status.HTTP_202_ACCEPTED)
