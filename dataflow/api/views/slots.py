"""The replication slots of the postgres cdc flows the user may see."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response

from dataflow.api.schema import errors
from dataflow.api.serializers import SlotReportSerializer
from dataflow.api.views.base import ApiDefaults
from dataflow.selectors.flows import slots_visible


@extend_schema(
    summary="The replication slots of your cdc flows, their lag, and (staff) slots left behind",
    responses={200: SlotReportSerializer, **errors()},
)
class SlotsView(ApiDefaults, GenericAPIView):
    serializer_class = SlotReportSerializer

    def get(self, request):
        return Response(SlotReportSerializer(slots_visible(user=request.user)).data)
