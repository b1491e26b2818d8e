"""A token for a username and password (``manage.py drf_create_token USER`` makes one too)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.exceptions import Throttled

from dataflow.api.parsers import BoundedJSONParser
from dataflow.api.permissions import LoginThrottle
from dataflow.api.schema import errors
from dataflow.api.serializers import TokenSerializer
from dataflow.services.login_throttle import LoginAttempt, login_attempt_succeeded, login_refusal_text


@extend_schema(
    summary="Get your API token (send it as 'Authorization: Token <key>')",
    request=AuthTokenSerializer,
    responses={200: TokenSerializer, **errors(400, 413, 429)},
    auth=[],
)
class TokenView(ObtainAuthToken):
    parser_classes = (BoundedJSONParser,)
    authentication_classes = ()
    # ObtainAuthToken has none: every wrong password was a free guess.
    throttle_classes = (LoginThrottle,)
    flow_permissions = {"POST": None}
    #: Left by LoginThrottle, which runs before the view's handler.
    login_attempt: LoginAttempt

    def throttled(self, request, wait):
        refusal = Throttled(detail=login_refusal_text(wait_s=int(wait)))
        # Set after: given to Throttled, it would say the wait twice. Throttled sets wait in
        # __init__ (the handler reads it for Retry-After); the stubs leave it out.
        refusal.wait = wait  # pyright: ignore[reportAttributeAccessIssue]
        raise refusal

    def post(self, request, *args, **kwargs):
        response = super().post(request, *args, **kwargs)  # a wrong password raises: a failure
        login_attempt_succeeded(attempt=self.login_attempt)
        return response
