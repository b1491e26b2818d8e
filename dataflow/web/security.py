"""A strict Content-Security-Policy on every response: the dashboard's, the admin's and the
API docs' scripts and styles are files this deployment serves, none inline, so a script
injected into a page (a flow's name, a run's message) never runs."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse


class ContentSecurityPolicyMiddleware:
    """Sets ``Content-Security-Policy`` (``DATAFLOW_CONTENT_SECURITY_POLICY``) on each
    response that has none; an empty setting sets none (a host project with its own)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        policy = settings.DATAFLOW_CONTENT_SECURITY_POLICY
        if policy and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = policy
        return response
