"""Token authentication that refuses an expired token (``DATAFLOW_TOKEN_TTL``) with a
401 saying so and how to get a new one."""

from __future__ import annotations

from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from dataflow.services.tokens import token_expired, token_expires_at


class ExpiringTokenAuthentication(TokenAuthentication):
    def authenticate_credentials(self, key):
        user, token = super().authenticate_credentials(key)
        if token_expired(token=token):
            expires = token_expires_at(token=token)
            raise AuthenticationFailed(
                f"the token expired at {expires:%Y-%m-%d %H:%M:%S %Z} (DATAFLOW_TOKEN_TTL); "
                "get a new one with POST /api/auth/token/"
            )
        return user, token
