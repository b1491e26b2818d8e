"""What every view of a flow's sub-resource shares: finding the flow the user may see."""

from __future__ import annotations

from rest_framework.exceptions import NotFound
from rest_framework.generics import GenericAPIView

from dataflow.models import DataFlow
from dataflow.selectors.visibility import flows_visible

#: A flow's name in a URL (DataFlow.name is a slug).
FLOW_NAME_RE = r"[-a-zA-Z0-9_]+"
#: The throttle scope of every unsafe request (REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]).
WRITE_SCOPE = "api-write"


class FlowScopedView(GenericAPIView):
    """A view under ``flows/<name>/``: the flow is one the user owns, or any for staff;
    another user's flow is a 404, as a flow that does not exist."""

    throttle_scope = WRITE_SCOPE

    def get_flow(self) -> DataFlow:
        flow = flows_visible(user=self.request.user).filter(name=self.kwargs["name"]).first()
        if flow is None:
            raise NotFound(f"no flow named {self.kwargs['name']!r}")
        return flow
