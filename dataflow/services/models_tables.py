"""A Django model's table, for a postgres source's or sink's ``model = "app_label.ModelName"``:
its schema and name, and the URL of the database its alias names (connectors know nothing
of Django, so they are handed this through ``Environment.model_table``)."""

from __future__ import annotations

from urllib.parse import quote

from django.apps import apps
from django.db import connections, router

from source_support.environment import ModelTable
from source_support.errors import ConfigError

DEFAULT_SCHEMA = "public"


def model_table(label: str, field: str) -> ModelTable:
    """The table of model ``label`` (``app_label.ModelName``) and its database's URL; a
    ConfigError naming ``field`` for a model that does not exist or is not on PostgreSQL."""
    try:
        model = apps.get_model(label)
    except (LookupError, ValueError):
        raise ConfigError(field, f"{label!r} is not an installed model (app_label.ModelName)") from None
    alias = router.db_for_read(model) or "default"
    db_table = model._meta.db_table
    schema, _, name = db_table.rpartition(".") if '"' not in db_table else ("", "", db_table)
    return ModelTable(schema=schema or DEFAULT_SCHEMA, name=name, url=database_url(alias))


def database_url(alias: str = "default") -> str:
    """The URL of database ``alias`` when it is PostgreSQL; empty otherwise."""
    settings_dict = connections[alias].settings_dict
    if "postgresql" not in settings_dict.get("ENGINE", ""):
        return ""
    user = quote(settings_dict.get("USER") or "", safe="")
    password = quote(settings_dict.get("PASSWORD") or "", safe="")
    auth = f"{user}:{password}@" if password else f"{user}@" if user else ""
    host = settings_dict.get("HOST") or "localhost"
    host = f"[{host}]" if ":" in host else host
    port = settings_dict.get("PORT") or 5432
    return f"postgres://{auth}{host}:{port}/{quote(settings_dict.get('NAME') or '', safe='')}"
