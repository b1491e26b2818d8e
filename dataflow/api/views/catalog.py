"""The installed connector types and the JSON Schemas of their config objects."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response

from dataflow.api.schema import errors
from dataflow.api.serializers import ConnectorCatalogSerializer
from dataflow.api.views.base import ApiDefaults
from source_support.registry import connector_catalog


@extend_schema(
    summary="Installed source, format and sink types, with the JSON Schema of each one's config",
    responses={200: ConnectorCatalogSerializer, **errors()},
)
class ConnectorCatalogView(ApiDefaults, GenericAPIView):
    serializer_class = ConnectorCatalogSerializer

    def get(self, request):
        return Response(ConnectorCatalogSerializer(connector_catalog()).data)
