"""Know before you run: preview a flow on real records, test a connector's options or a
named connection. Each reads only what the asking user may read; none writes anything."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response

from dataflow.api.schema import errors
from dataflow.api.serializers import (
    ConnectionTestRequestSerializer,
    ConnectionTestSerializer,
    ConnectorTestRequestSerializer,
    FlowPreviewSerializer,
    PreviewOptionsSerializer,
    PreviewSerializer,
)
from dataflow.api.views.base import WRITE_SCOPE, ApiDefaults, FlowScopedView
from dataflow.selectors.visibility import connections_visible
from dataflow.services.connection_test import connection_test, connection_test_refusal, connector_test
from dataflow.services.preview import flow_preview
from dataflow.services.specs import flow_spec_of
from source_support.errors import ConfigError
from source_support.registry import SINKS, SOURCES

PREVIEW_DESCRIPTION = (
    "Reads up to `limit` records through the real connector (nothing is landed, no position "
    "moves upstream, no sink is written), parses them with the flow's format and runs the "
    "transform by Spark over them. 429 while another preview or test of yours runs."
)


class ProbeView(ApiDefaults, GenericAPIView):
    """A POST that reads (no flow is changed): a login suffices, throttled as a write."""

    flow_permissions = {"POST": None}
    throttle_scope = WRITE_SCOPE


class FlowPreviewView(ProbeView):
    serializer_class = FlowPreviewSerializer

    @extend_schema(
        summary="Preview a flow spec on real records (it need not be saved)",
        operation_id="flows_preview_spec",
        description="The flow spec as POST /flows/ takes it, with `limit`, `timeout_s` and `from`. "
        + PREVIEW_DESCRIPTION,
        request=FlowPreviewSerializer,
        responses={200: PreviewSerializer, **errors(400, 413, 429)},
    )
    def post(self, request):
        body = FlowPreviewSerializer(data=request.data, context=self.get_serializer_context())
        body.is_valid(raise_exception=True)
        return _previewed(body.validated_data["spec"], request.user, request.user, body.validated_data)


@extend_schema(
    summary="Preview a stored flow on real records",
    description="Body: `limit`, `timeout_s`, `from` (all optional). " + PREVIEW_DESCRIPTION,
    request=PreviewOptionsSerializer,
    responses={200: PreviewSerializer, **errors(400, 404, 413, 429)},
)
class FlowNamedPreviewView(FlowScopedView):
    serializer_class = PreviewOptionsSerializer
    flow_permissions = {"POST": None}

    def post(self, request, name: str):
        flow = self.get_flow()
        body = PreviewOptionsSerializer(data=request.data if request.data is not None else {})
        body.is_valid(raise_exception=True)
        return _previewed(flow_spec_of(flow), flow.owner, request.user, body.validated_data)


def _previewed(spec, owner, user, options) -> Response:
    """The preview of ``spec`` as ``owner``'s flow, asked by ``user``, with the body's options."""
    answer = flow_preview(
        spec=spec,
        owner=owner,
        user=user,
        limit=options.get("limit"),
        timeout_s=options.get("timeout_s"),
        start=options.get("from"),
    )
    return Response(answer)


@extend_schema(
    summary="Test a connector's options: what they reach now, or what failed",
    description="Body: the [source] or [sink] options as in a TOML file (without `type`, which "
    "is the URL's), with `section` (source or sink), a source's `format` and `timeout_s`. "
    "200 `{ok: true, found: [...]}` or `{ok: false, field, error}`; 400 for options a flow of "
    "yours could not have (a connection not granted, a path not allowed).",
    request=ConnectorTestRequestSerializer,
    parameters=[OpenApiParameter("type", OpenApiTypes.STR, OpenApiParameter.PATH)],
    responses={200: ConnectionTestSerializer, **errors(400, 404, 413, 429)},
)
class ConnectorTestView(ProbeView):
    serializer_class = ConnectorTestRequestSerializer

    def post(self, request, type: str):
        if type not in SOURCES and type not in SINKS:
            raise NotFound(f"no connector type {type!r} (see /api/connectors/)")
        if not isinstance(request.data, dict):
            raise ConfigError("section", "the body is a JSON object: the connector's options")
        options = dict(request.data)
        section = options.pop("section", "source" if type in SOURCES else "sink")
        format_table = options.pop("format", None)
        timeout_s = options.pop("timeout_s", None)
        if format_table is not None and not isinstance(format_table, dict):
            raise ConfigError("format", "must be an object (the [format] table)")
        answer = connector_test(
            section=section,
            table={**options, "type": type},
            owner=request.user,
            user=request.user,
            format_table=format_table,
            timeout_s=timeout_s,
        )
        return Response(answer)


@extend_schema(
    summary="Test a named connection: its server answers, and what its patterns match",
    request=ConnectionTestRequestSerializer,
    responses={200: ConnectionTestSerializer, **errors(400, 403, 404, 413, 429)},
)
class ConnectionTestView(ProbeView):
    serializer_class = ConnectionTestRequestSerializer

    def post(self, request, name: str):
        connection = connections_visible(user=request.user).filter(name=name).first()
        if connection is None:
            raise NotFound(f"no connection named {name!r} is granted to you")
        refusal = connection_test_refusal(connection=connection, user=request.user)
        if refusal is not None:
            raise PermissionDenied(refusal)
        body = ConnectionTestRequestSerializer(data=request.data if request.data is not None else {})
        body.is_valid(raise_exception=True)
        return Response(
            connection_test(
                connection=connection, user=request.user, timeout_s=body.validated_data.get("timeout_s")
            )
        )
