"""OpenAPI pieces shared by the views: the error answers and the flow's path parameter."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse

from dataflow.api.serializers import DetailSerializer

_ERRORS = {
    400: OpenApiResponse(
        OpenApiTypes.OBJECT,
        description='Refused input: field errors keyed by dotted names ({"source.path": ["..."]}) or {"detail": "..."}.',
    ),
    401: OpenApiResponse(DetailSerializer, description="Not authenticated."),
    403: OpenApiResponse(DetailSerializer, description="No permission (add/change/delete_dataflow)."),
    404: OpenApiResponse(DetailSerializer, description="No such flow (or not yours)."),
    409: OpenApiResponse(
        DetailSerializer, description="The flow's state does not allow it (or the name exists)."
    ),
    413: OpenApiResponse(DetailSerializer, description="The request body is too large."),
    429: OpenApiResponse(DetailSerializer, description="Too many write requests: try again later."),
}


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    """The documented error answers ``codes`` (401 is always one: every endpoint wants a login)."""
    return {code: _ERRORS[code] for code in sorted({401, *codes})}
