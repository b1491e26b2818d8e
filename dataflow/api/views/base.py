"""What every view of the API shares: its own DRF settings (``ApiDefaults``), and for a
flow's sub-resource, finding the flow the user may see."""

from __future__ import annotations

from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.openapi import AutoSchema
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import NotFound
from rest_framework.generics import GenericAPIView
from rest_framework.renderers import JSONRenderer

from dataflow.api.authentication import ExpiringTokenAuthentication
from dataflow.api.errors import exception_handler
from dataflow.api.pagination import Pagination
from dataflow.api.parsers import BoundedJSONParser
from dataflow.api.permissions import FlowModelPermission, WriteRateThrottle
from dataflow.models import DataFlow
from dataflow.selectors.visibility import flows_visible

#: A flow's name in a URL (DataFlow.name is a slug).
FLOW_NAME_RE = r"[-a-zA-Z0-9_]+"
#: The throttle scope of every unsafe request (REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]).
WRITE_SCOPE = "api-write"


class ApiSchema:
    """Described by drf-spectacular, and its refusals answered by the app's exception
    handler, whatever the project's ``REST_FRAMEWORK`` says (first among a view's bases)."""

    schema = AutoSchema()

    def get_exception_handler(self):
        return exception_handler


class ApiDefaults(ApiSchema):
    """The API's own DRF settings, so it behaves the same in any project, whatever the
    project's ``REST_FRAMEWORK`` defaults are (first among a view's bases; a view sets its
    own on top): token or session logins (token first: an anonymous request is a 401 with
    WWW-Authenticate, not a 403), ownership or staff to read and the model permissions to
    write, JSON in and out, pages, filters, and unsafe requests throttled per user."""

    authentication_classes = [ExpiringTokenAuthentication, SessionAuthentication]
    permission_classes = [FlowModelPermission]
    parser_classes = [BoundedJSONParser]
    renderer_classes = [JSONRenderer]
    pagination_class = Pagination
    filter_backends = [DjangoFilterBackend]
    throttle_classes = [WriteRateThrottle]


class FlowScopedView(ApiDefaults, GenericAPIView):
    """A view under ``flows/<name>/``: the flow is one the user owns, or any for staff;
    another user's flow is a 404, as a flow that does not exist."""

    throttle_scope = WRITE_SCOPE

    def get_flow(self) -> DataFlow:
        flow = flows_visible(user=self.request.user).filter(name=self.kwargs["name"]).first()
        if flow is None:
            raise NotFound(f"no flow named {self.kwargs['name']!r}")
        return flow
