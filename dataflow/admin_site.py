"""The admin site: Django's, with its login throttled as the dashboard's and the API's are.

Installed as the default site (``apps.DataflowAdminConfig``), so ``admin.site`` and
``@admin.register`` are this site. Not in ``dataflow/admin/``: that package registers the
ModelAdmins on import, which needs this site to exist first.
"""

from __future__ import annotations

from django.contrib.admin import AdminSite

from dataflow.services.login_throttle import LoginThrottleUnavailable
from dataflow.web.login import (
    ThrottledAdminAuthenticationForm,
    login_refusal_status,
    login_unavailable_response,
)


class DataflowAdminSite(AdminSite):
    login_form = ThrottledAdminAuthenticationForm

    def login(self, request, extra_context=None):
        try:
            return login_refusal_status(super().login(request, extra_context))
        except LoginThrottleUnavailable as error:
            return login_unavailable_response(error)
