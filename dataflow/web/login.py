"""Logins through a form (the dashboard's and the admin's pages), throttled by user name and
by client address (``services.login_throttle``): a refused login is a 429 with
``Retry-After``, and the page says how long to wait. When failed logins cannot be counted
(Redis is down) a login is refused with a plain 503 page and ``Retry-After``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.core.exceptions import ValidationError
from django.http import HttpResponse

from dataflow.services.login_throttle import (
    LoginThrottleUnavailable,
    client_address_of,
    login_attempt_begin,
    login_attempt_succeeded,
    login_refusal_text,
)

if TYPE_CHECKING:
    # What the mixin is mixed into, for the checker (its self.data, self.request, clean);
    # at run time a plain mixin, first in the forms' bases.
    _LoginForm = AuthenticationForm
else:
    _LoginForm = object


class ThrottledLoginMixin(_LoginForm):
    """An AuthenticationForm that takes a login attempt before checking the password and
    gives it back if the login succeeds. ``login_wait_s`` > 0: refused unchecked."""

    login_wait_s = 0

    def clean(self):
        attempt = login_attempt_begin(
            username=self.data.get("username", ""), address=client_address_of(self.request)
        )
        if attempt.refused:
            self.login_wait_s = attempt.wait_s
            raise ValidationError(login_refusal_text(wait_s=attempt.wait_s), code="throttled")
        cleaned = super().clean()  # a wrong password raises: the attempt stays a failure
        if self.get_user() is not None:
            login_attempt_succeeded(attempt=attempt)
        return cleaned


class ThrottledAuthenticationForm(ThrottledLoginMixin, AuthenticationForm):
    """The dashboard's login form."""


class ThrottledAdminAuthenticationForm(ThrottledLoginMixin, AdminAuthenticationForm):
    """The admin's login form (staff only, as Django's)."""


def login_refusal_status(response: HttpResponse) -> HttpResponse:
    """``response`` of a login view, made a 429 with Retry-After if its form was refused
    for too many failures."""
    form = (getattr(response, "context_data", None) or {}).get("form")
    wait_s = getattr(form, "login_wait_s", 0)
    if wait_s:
        response.status_code = 429
        response["Retry-After"] = str(wait_s)
    return response


def login_unavailable_response(error: LoginThrottleUnavailable) -> HttpResponse:
    """The plain page a login refused for want of Redis gets: a 503 with Retry-After."""
    response = HttpResponse(str(error), status=503, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(error.retry_after_s)
    return response


class DashboardLoginView(LoginView):
    """The dashboard's login: any account (a flow's owner need not be staff)."""

    template_name = "dataflow/dashboard/login.html"
    # Without ?next=, the dashboard, under whatever prefix the project put it (not the
    # project's LOGIN_REDIRECT_URL, which is its own pages').
    next_page = "dataflow:dashboard:index"
    redirect_authenticated_user = True
    authentication_form = ThrottledAuthenticationForm

    def post(self, request, *args, **kwargs):
        try:
            return super().post(request, *args, **kwargs)
        except LoginThrottleUnavailable as error:
            return login_unavailable_response(error)

    def form_invalid(self, form):
        return login_refusal_status(super().form_invalid(form))
