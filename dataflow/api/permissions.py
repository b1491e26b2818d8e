"""Who may do what through the API, and how often.

Seeing a flow (and its runs, dead letters, offsets...) takes only a login and ownership or
staff: get_queryset hides other users' flows, so they are a 404. Writing takes Django's
model permissions as well: ``add_dataflow`` to create, ``change_dataflow`` to change a
flow or act on it, ``delete_dataflow`` to delete it.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from rest_framework.permissions import SAFE_METHODS, IsAuthenticated
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle, ScopedRateThrottle

from dataflow.services.login_throttle import client_address_of, login_attempt_begin

#: What an unsafe method needs by default: a view sets ``flow_permissions`` to differ.
DEFAULT_FLOW_PERMISSIONS = {"POST": "change", "PUT": "change", "PATCH": "change", "DELETE": "change"}


class FlowModelPermission(IsAuthenticated):
    """A login for any request; for an unsafe one, the model permission the view names for
    the method in ``flow_permissions`` ("add", "change", "delete" or None: none)."""

    def has_permission(self, request, view) -> bool:
        if not super().has_permission(request, view):
            return False
        if request.method in SAFE_METHODS:
            return True
        needed = getattr(view, "flow_permissions", DEFAULT_FLOW_PERMISSIONS).get(request.method, "change")
        user = request.user  # logged in (IsAuthenticated): an AbstractUser (auth.User)
        return needed is None or (
            isinstance(user, AbstractUser) and user.has_perm(f"dataflow.{needed}_dataflow")
        )


class WriteRateThrottle(ScopedRateThrottle):
    """ScopedRateThrottle on unsafe methods only (reads are not throttled). The rate is read
    from REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"] on each request, not once at import, so a
    deployment or a test that changes the setting is obeyed; a project whose REST_FRAMEWORK
    names no rate for the scope has ``DATAFLOW_API_WRITE_RATE``."""

    def allow_request(self, request, view) -> bool:
        if request.method in SAFE_METHODS:
            return True
        return super().allow_request(request, view)

    def get_rate(self):
        if self.scope is None:
            return None  # as the rates' get(None) was; allow_request asks only with a scope
        rate = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)
        return rate or (settings.DATAFLOW_API_WRITE_RATE if self.scope == "api-write" else None)


class LoginThrottle(BaseThrottle):
    """Failed logins per user name and per client address (``services.login_throttle``),
    shared by every web process. It takes the attempt and leaves it on the view as
    ``login_attempt``; the view gives it back when the password was right."""

    def __init__(self) -> None:
        self.wait_s = 0

    def allow_request(self, request, view) -> bool:
        if request.method != "POST":
            return True  # only a POST logs in (a GET is a 405, not a guess)
        body = request.data if isinstance(request.data, dict) else {}
        username = body.get("username")
        attempt = login_attempt_begin(
            username=username if isinstance(username, str) else "", address=client_address_of(request)
        )
        self.wait_s = attempt.wait_s
        # The view that takes this throttle declares login_attempt (TokenView); the throttle's
        # signature is BaseThrottle's, for any view.
        view.login_attempt = attempt  # pyright: ignore[reportAttributeAccessIssue]
        return not attempt.refused

    def wait(self) -> float:
        return self.wait_s
