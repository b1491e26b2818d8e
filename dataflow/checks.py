"""System checks: a landing zone that cannot work is refused at start-up, and so are keys of
``DATAFLOW_SECRET_KEYS`` that are not Fernet keys; a connector plugin that failed to load is
reported (the service runs on without its types), and so is a project whose DRF settings
leave the API without its OpenAPI schema.

Readers write each batch under ``DATAFLOW_LANDING_ROOT`` and the Spark job reads those
files by path. With a cluster master or Spark Connect the reading happens in other
processes, usually on other machines, so the path must name the same files there.
"""

from __future__ import annotations

from django.core.checks import Error, Warning
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string
from rest_framework.settings import api_settings

from dataflow.encryption import keys_check
from dataflow.spark.deployment import landing_problems
from source_support.plugins import GROUP
from source_support.registry import FAILED_PLUGINS, SOURCES


def check_landing_zone(app_configs=None, **kwargs) -> list[Error]:
    """Django system check (registered in ``DataflowConfig.ready``)."""
    return [Error(message, id=check_id) for check_id, message in landing_problems()]


def check_secret_keys(app_configs=None, **kwargs) -> list[Error]:
    """Django system check: ``DATAFLOW_SECRET_KEYS`` holds Fernet keys (the error names the
    setting and the key's position, never a key)."""
    try:
        keys_check()
    except ImproperlyConfigured as exc:
        return [Error(str(exc), hint="docs/deployment.md, 'Secret keys'", id="dataflow.E004")]
    return []


def check_connector_plugins(app_configs=None, **kwargs) -> list[Warning]:
    """Django system check: one warning per connector plugin that failed to load, naming its
    entry point (``source_support.plugins``), and one if no source type is registered at all
    (no ``pyproject.toml`` beside the code and no installed distribution declares one)."""
    none_found = [
        Warning(
            f"no source connector is registered: no entry point of the group {GROUP} was found",
            hint="Run from a checkout (its pyproject.toml declares them) or pip install the project.",
            id="dataflow.W102",
        )
    ]
    return (none_found if not SOURCES else []) + [
        Warning(
            f"connector plugin {entry_point} failed to load: {reason}",
            hint="Its source, sink and format types are unavailable; the log holds the traceback.",
            id="dataflow.W101",
        )
        for entry_point, reason in FAILED_PLUGINS.items()
    ]


def check_api_schema_class(app_configs=None, **kwargs) -> list[Warning]:
    """Django system check: the API's schema (``api/schema/``, the docs page) is made by
    drf-spectacular, whose annotations on a view's methods take the project's
    ``DEFAULT_SCHEMA_CLASS`` as their base: DRF's own makes the schema a 500."""
    schema_class = api_settings.DEFAULT_SCHEMA_CLASS  # imported by DRF when read
    spectacular = import_string(
        "drf_spectacular.openapi.AutoSchema"
    )  # not at import: DRF's views need the apps
    if isinstance(schema_class, type) and issubclass(schema_class, spectacular):
        return []
    return [
        Warning(
            f"REST_FRAMEWORK['DEFAULT_SCHEMA_CLASS'] is {schema_class!r}: the API's schema and docs "
            "pages need drf-spectacular's",
            hint='Set REST_FRAMEWORK = {"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"} '
            "(docs/install-into-your-project.md).",
            id="dataflow.W103",
        )
    ]
