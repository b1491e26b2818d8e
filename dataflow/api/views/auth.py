"""A token for a username and password (``manage.py drf_create_token USER`` makes one too),
and its revocation by its holder."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.exceptions import Throttled
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from dataflow.api.authentication import ExpiringTokenAuthentication
from dataflow.api.parsers import BoundedJSONParser
from dataflow.api.permissions import LoginThrottle
from dataflow.api.schema import errors
from dataflow.api.serializers import TokenSerializer
from dataflow.api.views.base import ApiSchema
from dataflow.services.login_throttle import LoginAttempt, login_attempt_succeeded, login_refusal_text
from dataflow.services.tokens import token_issue, token_revoke


@extend_schema(
    summary="Get your API token (send it as 'Authorization: Token <key>')",
    request=AuthTokenSerializer,
    responses={200: TokenSerializer, **errors(400, 413, 429)},
    auth=[],
)
class TokenView(ApiSchema, ObtainAuthToken):
    # JSON, or a form as curl -d / -F sends it (Django bounds a form's size itself).
    parser_classes = (BoundedJSONParser, FormParser, MultiPartParser)
    authentication_classes = ()
    # ObtainAuthToken has none: every wrong password was a free guess.
    throttle_classes = (LoginThrottle,)
    flow_permissions = {"POST": None, "DELETE": None}
    #: Left by LoginThrottle, which runs before the view's handler.
    login_attempt: LoginAttempt

    def throttled(self, request, wait):
        refusal = Throttled(detail=login_refusal_text(wait_s=int(wait)))
        # Set after: given to Throttled, it would say the wait twice. Throttled sets wait in
        # __init__ (the handler reads it for Retry-After); the stubs leave it out.
        refusal.wait = wait  # pyright: ignore[reportAttributeAccessIssue]
        raise refusal

    def get_authenticators(self):
        # Logging in takes no credentials but the body's; revoking takes the token itself.
        if self.request is not None and self.request.method == "DELETE":
            return [ExpiringTokenAuthentication()]
        return super().get_authenticators()

    def get_permissions(self):
        if self.request is not None and self.request.method == "DELETE":
            return [IsAuthenticated()]
        return super().get_permissions()

    def post(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)  # a wrong password raises: a failure
        login_attempt_succeeded(attempt=self.login_attempt)
        return Response({"token": token_issue(user=serializer.validated_data["user"]).key})

    @extend_schema(
        summary="Revoke your API token (log in again for a new one)",
        request=None,
        responses={204: None, **errors(401)},
    )
    def delete(self, request, *args, **kwargs):
        token_revoke(user=request.user)
        return Response(status=204)
