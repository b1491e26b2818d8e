"""The Django apps: ``dataflow`` (connector plugins loaded, system checks) and the admin on
the project's own site."""

from django.apps import AppConfig
from django.conf import settings
from django.contrib.admin import apps as admin_apps
from django.core import checks
from django.db.models.signals import pre_save

from dataflow import celery_hooks, conf  # noqa: F401 - celery_hooks: its signal handlers, for any Celery app
from dataflow.checks import (
    check_api_schema_class,
    check_connector_plugins,
    check_landing_zone,
    check_secret_keys,
)
from source_support.plugins import load_connectors


class DataflowAdminConfig(admin_apps.AdminConfig):
    """django.contrib.admin with the project's site (a throttled login) as the default."""

    default = False  # named in INSTALLED_APPS; "dataflow" itself is DataflowConfig

    default_site = "dataflow.admin_site.DataflowAdminSite"


class DataflowConfig(AppConfig):
    name = "dataflow"
    verbose_name = "Dataflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Every app setting the project did not set gets its default (dataflow/conf.py).
        conf.apply_defaults(settings)
        if settings.DATAFLOW_OWN_CELERY_APP:
            # The checkout's Celery app, the current one from here on, as a project's own is
            # once its package is imported.
            import dataflow.celery  # noqa: F401, PLC0415 - made only where the settings ask for it
        # Before any request or task: every connector plugin (the built-in ones too) is
        # loaded once; one that fails is logged and reported by check_connector_plugins.
        load_connectors()
        checks.register(check_landing_zone)
        checks.register(check_connector_plugins)
        checks.register(check_secret_keys)
        checks.register(check_api_schema_class)
        pre_save.connect(
            _password_change_revokes_token,
            sender=settings.AUTH_USER_MODEL,
            dispatch_uid="dataflow-password-change-revokes-token",
        )


def _password_change_revokes_token(sender, instance, raw=False, **kwargs) -> None:
    """Wherever a password changes (the admin, ``changepassword``, a host project's own
    view), the user's API token goes with the old password."""
    if raw:
        return  # loading fixtures
    from dataflow.services import tokens  # noqa: PLC0415 - needs the models loaded

    tokens.token_revoke_if_password_changed(user=instance)
