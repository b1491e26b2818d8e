"""Flows: list, create, read, replace, merge, delete, and validate a spec without saving it."""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.reverse import reverse

from dataflow.api.filters import FlowFilter
from dataflow.api.schema import errors
from dataflow.api.serializers import (
    FlowDeleteQuerySerializer,
    FlowReplaceSerializer,
    FlowSerializer,
    ValidSerializer,
)
from dataflow.api.views.base import FLOW_NAME_RE, WRITE_SCOPE, ApiDefaults
from dataflow.selectors.runs import latest_runs_of
from dataflow.selectors.visibility import flows_visible
from dataflow.services.flows import flow_create, flow_delete, flow_merge, flow_replace
from dataflow.services.specs import flow_spec_validate

FLOW_BODY = (
    "The TOML flow file as JSON: the [flow] keys (name, parallelism, batch_size, ...) at the "
    "top level, each other section (source, format, transform, sink, stop, schedule, notify) "
    "as an object."
)


@extend_schema_view(
    list=extend_schema(
        summary="List the flows you may see", responses={200: FlowSerializer(many=True), **errors()}
    ),
    create=extend_schema(
        summary="Create a flow",
        description=FLOW_BODY + " 409 if the name is taken.",
        responses={201: FlowSerializer, **errors(400, 403, 409, 413, 429)},
    ),
    retrieve=extend_schema(summary="A flow (secrets masked)", responses={200: FlowSerializer, **errors(404)}),
    update=extend_schema(
        summary="Replace a flow's spec",
        description=FLOW_BODY + " Keys left out take their defaults; a name must equal the URL's. "
        "A secret sent back masked keeps the stored one.",
        request=FlowReplaceSerializer,
        responses={200: FlowSerializer, **errors(400, 403, 404, 413, 429)},
    ),
    partial_update=extend_schema(
        summary="Merge changes into a flow's spec",
        description="Given [flow] keys replace the stored ones; a given section's keys are merged into "
        "the stored section (null removes a key), unless its type changes, which replaces it; a section "
        "set to null is removed.",
        responses={200: FlowSerializer, **errors(400, 403, 404, 413, 429)},
    ),
    destroy=extend_schema(
        summary="Delete a flow (its active run is stopped first)",
        description="Its sink directory is kept and stays yours (no other user's flow may read or write "
        "it) unless ?delete_output=true removes it with the flow (400 for a sink that is no directory).",
        parameters=[FlowDeleteQuerySerializer],
        responses={204: None, **errors(400, 403, 404, 429)},
    ),
)
class FlowViewSet(ApiDefaults, viewsets.GenericViewSet):
    """Flows by name. A user sees and changes only their own flows; staff see all."""

    serializer_class = FlowSerializer
    filterset_class = FlowFilter
    lookup_field = "name"
    lookup_value_regex = FLOW_NAME_RE
    throttle_scope = WRITE_SCOPE

    @property
    def flow_permissions(self) -> dict[str, str | None]:
        if self.action == "validate":
            return {"POST": None}  # saves nothing
        return {"POST": "add", "PUT": "change", "PATCH": "change", "DELETE": "delete"}

    def get_queryset(self):
        return flows_visible(user=self.request.user)

    def get_object(self):
        try:
            return super().get_object()
        except Http404:
            raise NotFound(f"no flow named {self.kwargs['name']!r}") from None

    def list(self, request):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        assert page is not None  # every list is paged (DEFAULT_PAGINATION_CLASS, PAGE_SIZE)
        serializer = self.get_serializer(
            page, many=True, context={"latest_runs": latest_runs_of(flows=list(page))}
        )
        return self.get_paginated_response(serializer.data)

    def create(self, request):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        flow = flow_create(spec=serializer.validated_data, owner=request.user)
        location = reverse("dataflow:api:flow-detail", kwargs={"name": flow.name}, request=request)
        return Response(
            self.get_serializer(flow).data, status=status.HTTP_201_CREATED, headers={"Location": location}
        )

    def retrieve(self, request, name: str):
        return Response(self.get_serializer(self.get_object()).data)

    def update(self, request, name: str):
        flow = self.get_object()
        serializer = FlowReplaceSerializer(
            data=request.data, context={**self.get_serializer_context(), "name": name}
        )
        serializer.is_valid(raise_exception=True)
        flow = flow_replace(flow=flow, spec=serializer.validated_data)
        return Response(self.get_serializer(flow).data)

    def partial_update(self, request, name: str):
        flow = self.get_object()
        serializer = self.get_serializer(data=request.data, partial=True, context_name=name)
        serializer.is_valid(raise_exception=True)
        flow = flow_merge(flow=flow, changes=serializer.validated_data)
        return Response(self.get_serializer(flow).data)

    def destroy(self, request, name: str):
        flow = self.get_object()
        query = FlowDeleteQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        flow_delete(flow=flow, delete_output=query.validated_data["delete_output"])
        return Response(status=status.HTTP_204_NO_CONTENT)

    def get_serializer(self, *args, context_name: str | None = None, **kwargs):
        context = {**self.get_serializer_context(), **kwargs.pop("context", {})}
        if context_name is not None:
            context["name"] = context_name  # the URL's: a body must not rename the flow
        return self.get_serializer_class()(*args, context=context, **kwargs)

    @extend_schema(
        summary="Check a flow spec without saving it",
        description=FLOW_BODY + ' The name need not be free. 200 {"valid": true}, or 400 with the '
        "field errors (Kafka Connect's config/validate).",
        request=FlowSerializer,
        responses={200: ValidSerializer, **errors(400, 413, 429)},
    )
    @action(detail=False, methods=["post"])
    def validate(self, request):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        flow_spec_validate(serializer.validated_data, owner=request.user)
        return Response({"valid": True})
