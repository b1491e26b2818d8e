"""The API's EXCEPTION_HANDLER: the services' refusals as HTTP answers, never a 500.

- ``ConfigError`` -> 400 ``{"<dotted field>": ["<reason>"]}`` (the names TOML errors use;
  a ``flow.<key>`` error is also given under ``<key>``, the body's own name for it);
- ``QuotaExceeded`` -> 403 ``{"detail": "...", "quota": "<name>"}`` (the owner's quota);
- ``FlowStateError`` -> 409 ``{"detail": "..."}`` (an action the flow's state refuses, a
  name that exists);
- ``RequestDataTooBig`` -> 413 ``{"detail": "..."}``;
- ``LoginThrottleUnavailable`` -> 503 ``{"detail": "..."}`` with Retry-After (a login
  refused because failed logins cannot be counted);
- ``TooManyAtOnce`` -> 429 ``{"detail": "..."}`` with Retry-After (a preview or a test
  of a connection beyond the user's at once);
- a row that does not exist (deleted meanwhile) -> 404;
- everything else as DRF answers it (ParseError 400, NotAuthenticated 401, ...).
"""

from __future__ import annotations

from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.http import Http404
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from dataflow.services.errors import FlowStateError, QuotaExceeded, TooManyAtOnce
from dataflow.services.login_throttle import LoginThrottleUnavailable
from dataflow.services.specs import FLOW_FIELDS
from source_support.errors import ConfigError


def exception_handler(exc, context):
    if isinstance(exc, ConfigError):
        return Response(config_error_body(exc), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, QuotaExceeded):
        return Response({"detail": str(exc), "quota": exc.quota}, status=status.HTTP_403_FORBIDDEN)
    if isinstance(exc, FlowStateError):
        return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, RequestDataTooBig):
        return Response(
            {"detail": f"Request body too large: {str(exc).rstrip('.')}."},
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, LoginThrottleUnavailable):
        return Response(
            {"detail": str(exc)},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(exc.retry_after_s)},
        )
    if isinstance(exc, TooManyAtOnce):
        return Response(
            {"detail": str(exc)},
            status=status.HTTP_429_TOO_MANY_REQUESTS,
            headers={"Retry-After": str(exc.retry_after_s)},
        )
    if isinstance(exc, ObjectDoesNotExist):
        exc = Http404()
    return drf_exception_handler(exc, context)


def config_error_body(exc: ConfigError) -> dict[str, list[str]]:
    """The field errors of a refused spec, keyed as the TOML errors are (``source.path``)."""
    body = {exc.field: [exc.reason]}
    section, _, key = exc.field.partition(".")
    if section == "flow" and key in FLOW_FIELDS:
        body[key] = [exc.reason]  # the [flow] keys are top-level keys of the API's body
    return body
