"""The Django apps: ``dataflow`` (connectors registered, system checks) and the admin on
the project's own site."""

from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps
from django.core import checks

import connectors  # noqa: F401  (registers every connector)
from dataflow.checks import check_landing_zone


class DataflowAdminConfig(admin_apps.AdminConfig):
    """django.contrib.admin with the project's site (a throttled login) as the default."""

    default = False  # named in INSTALLED_APPS; "dataflow" itself is DataflowConfig

    default_site = "dataflow.admin_site.DataflowAdminSite"


class DataflowConfig(AppConfig):
    name = "dataflow"
    verbose_name = "Dataflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        checks.register(check_landing_zone)
