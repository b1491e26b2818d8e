"""Every name the deployment itself uses in its Redis, from one place (STYLE.md: "Reserved
names come from one place"): Celery's queues (the default one, those of its routes and
declared queues, each ``runflow``'s), kombu's keys (queue bindings, the unacked index and
its mutex, a queue's priority lists, pidbox reply queues), Celery's result keys, the
coordination namespace (``DATAFLOW_REDIS_NAMESPACE``) and the Redis stream sink's own
staging keys. Computed from the settings at each call, so it follows whatever the names
become (a namespaced queue, a key prefix given to kombu).

Every check asks ``reserved_redis_keys``: a connection's key patterns when it is saved and
when a run resolves it (``connections``), and each key a run reads or writes on the
deployment's Redis (``Environment.reserved_keys``, checked by the connectors).

``reserved_tables`` is the same for tables: every table of the deployment's own apps and of
the postgres sink, asked when a postgres connection is saved, when a spec is validated and
when a run builds its source or sink (``Environment.reserved_tables``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.apps import apps
from django.conf import settings

from connectors.postgres.connection import CATALOG_GLOBS, OWN_TABLE_GLOBS
from connectors.redis_streams.sink import NAMESPACE as STREAM_SINK_NAMESPACE
from dataflow.models import DataFlow
from dataflow.services.queues import runflow_queue_name
from source_support.connections import glob_literal as _literal

#: kombu's Redis transport's defaults (``kombu.transport.redis.Channel``), which the broker's
#: transport options may change.
KOMBU_DEFAULTS = {
    "sep": "\x06\x16",
    "keyprefix_queue": "_kombu.binding.%s",
    "unacked_key": "unacked",
    "unacked_index_key": "unacked_index",
    "unacked_mutex_key": "unacked_mutex",
    "global_keyprefix": "",
}
#: A pidbox reply queue (``celery inspect``, ``control``): ``<uuid>.reply.celery.pidbox`` (a
#: worker's own pidbox queue is fanout: published, never a key).
PIDBOX_REPLY = "-".join("[0-9a-f]" * n for n in (8, 4, 4, 4, 12)) + ".reply.celery.pidbox"


def reserved_redis_keys() -> tuple[str, ...]:
    """Globs over every key the deployment uses in its Redis: a user's key that matches one
    (or a pattern that can) is refused."""
    options = {**KOMBU_DEFAULTS, **(getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {})}
    kombu_prefix = _literal(str(options["global_keyprefix"] or ""))
    kombu_keys = [
        _literal(str(options["keyprefix_queue"]).split("%s", 1)[0]) + "*",
        *(_literal(str(options[name])) for name in ("unacked_key", "unacked_index_key", "unacked_mutex_key")),
        "celery*",  # Celery's default queue and exchanges, its results (celery-task-meta-...)
        PIDBOX_REPLY,
    ]
    queue_keys: list[str] = []
    for queue in sorted(celery_queue_names()):
        queue_keys += [_literal(queue), _literal(queue + str(options["sep"])) + "*"]
    # runflow's queues, whatever name a flow has, and their priority lists.
    queue_keys.append(_literal(runflow_queue_name(DataFlow(name="\0"))).replace("\0", "*"))
    return (
        f"{_literal(settings.DATAFLOW_REDIS_NAMESPACE)}:*",
        f"{_literal(STREAM_SINK_NAMESPACE)}:*",
        *(kombu_prefix + key for key in [*kombu_keys, *queue_keys]),
        # And without the prefix: a host project's own Celery app on the same Redis keeps
        # kombu's and Celery's names unprefixed, and so did this deployment before its broker
        # keys were namespaced (its old queues may still hold tasks).
        *([*kombu_keys, *queue_keys] if kombu_prefix else []),
    )


#: Prefixes of the tables the deployment's own apps make (Django's, DRF's token, beat's, ours).
OWN_TABLE_PREFIXES = ("auth_", "django_", "dataflow_", "authtoken_", "django_celery_beat_")
#: The apps whose models' tables are the deployment's own, whatever they are named.
OWN_APP_MODULES = ("django.contrib.", "rest_framework", "django_celery_beat", "dataflow")


def reserved_tables() -> tuple[str, ...]:
    """Globs over ``schema.table`` (lower case) of every table the deployment itself uses:
    the prefixes of Django's, DRF's token, beat's and this app's tables, the table of each
    installed model of those apps (a renamed ``db_table`` too), the postgres sink's ledger
    and staging tables, and PostgreSQL's catalogs. No flow reads or writes one, whatever
    its connection's patterns say."""
    tables = {f"*.{_literal(prefix)}*" for prefix in OWN_TABLE_PREFIXES}
    for model in apps.get_models(include_auto_created=True):
        db_table = model._meta.db_table.lower()
        if model.__module__.startswith(OWN_APP_MODULES) and not db_table.startswith(OWN_TABLE_PREFIXES):
            tables.add(_literal(db_table) if "." in db_table else f"*.{_literal(db_table)}")
    return (*sorted(tables), *OWN_TABLE_GLOBS, *CATALOG_GLOBS)


def celery_queue_names() -> set[str]:
    """The queues the deployment's Celery sends to or consumes: its default queue, those of
    its routes and of its declared queues, and Celery's own default."""
    names = {"celery", settings.CELERY_TASK_DEFAULT_QUEUE}
    routes = getattr(settings, "CELERY_TASK_ROUTES", None) or {}
    for route in routes.values() if isinstance(routes, dict) else ():
        names.update(_queue_names([route.get("queue")] if isinstance(route, dict) else []))
    names.update(_queue_names(getattr(settings, "CELERY_TASK_QUEUES", None) or ()))
    return {name for name in names if name}


def _queue_names(queues: Iterable[Any]) -> set[str]:
    return {queue if isinstance(queue, str) else str(getattr(queue, "name", "")) for queue in queues if queue}
