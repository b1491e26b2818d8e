"""The admin site: Django's, with its login throttled as the dashboard's and the API's are.

Installed as the default site (``apps.DataflowAdminConfig``), so ``admin.site`` and
``@admin.register`` are this site. Not in ``dataflow/admin/``: that package registers the
ModelAdmins on import, which needs this site to exist first.
"""

from __future__ import annotations

from django.contrib.admin import AdminSite

from dataflow.web.login import ThrottledAdminAuthenticationForm, login_refusal_status


class DataflowAdminSite(AdminSite):
    login_form = ThrottledAdminAuthenticationForm

    def login(self, request, extra_context=None):
        return login_refusal_status(super().login(request, extra_context))
