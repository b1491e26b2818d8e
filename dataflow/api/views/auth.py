"""A token for a username and password (``manage.py drf_create_token USER`` makes one too)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.authtoken.views import ObtainAuthToken

from dataflow.api.parsers import BoundedJSONParser
from dataflow.api.schema import errors
from dataflow.api.serializers import TokenSerializer
from dataflow.api.views.base import WRITE_SCOPE


@extend_schema(
    summary="Get your API token (send it as 'Authorization: Token <key>')",
    request=AuthTokenSerializer,
    responses={200: TokenSerializer, **errors(400, 413, 429)},
    auth=[],
)
class TokenView(ObtainAuthToken):
    parser_classes = (BoundedJSONParser,)
    authentication_classes = ()
    throttle_scope = WRITE_SCOPE
    flow_permissions = {"POST": None}
