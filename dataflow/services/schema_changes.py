"""A run's schema changes (``format.on_schema_change``): the columns its landed files hold,
the changes as the API, the admin and the dashboard list them, and the webhook's
``schema.changed`` event."""

from __future__ import annotations

from typing import Any

from celery import current_app
from django.db import transaction

from dataflow.models import DataFlow, FlowRun, SchemaChangeRecord, WebhookDelivery
from dataflow.services.queues import WEBHOOK_DELIVER
from source_support.api import ADDED
from source_support.formats.drift import RESCUED

#: The webhook's event when a run saw schema changes (once per run).
SCHEMA_CHANGED = "schema.changed"
#: A run lists at most this many changes (one per column and kind).
MAX_CHANGES_LISTED = 200


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def run_landed_ddl(run: FlowRun) -> str:
    """The columns of the run's landed records, in Spark DDL: its schema, then under
    ``rescue`` the ``_rescued`` column, under ``evolve`` (``format.on_schema_change``, or a
    postgres cdc source's ``schema_change``) each column added so far, in the order first
    seen, in the type it lands as (a format's: STRING; a cdc column's: its own). Empty when
    the run has no schema (nothing to read)."""
    ddl = run.schema_ddl
    if not ddl:
        return ddl
    policy = (run.spec.get("format_options") or {}).get("on_schema_change")
    if policy == "rescue":
        return f"{ddl}, {_quoted(RESCUED)} STRING"
    added = SchemaChangeRecord.objects.filter(run=run, kind=ADDED, policy="evolve").values_list(
        "column_name", "new_type"
    )
    return ", ".join([ddl, *(f"{_quoted(name)} {new_type or 'STRING'}" for name, new_type in added)])


def run_schema_changes(run: FlowRun) -> list[dict[str, Any]]:
    """The run's changes, first seen first (at most ``MAX_CHANGES_LISTED``)."""
    rows = SchemaChangeRecord.objects.filter(run=run).order_by("id")[:MAX_CHANGES_LISTED]
    return [
        {
            "column": c.column_name,
            "kind": c.kind,
            "old_type": c.old_type,
            "new_type": c.new_type,
            "policy": c.policy,
            "first_position": c.first_position,
            "records": c.records,
        }
        for c in rows
    ]


def schema_changes_notify(*, run: FlowRun) -> WebhookDelivery | None:
    """Inside the caller's transaction: if the run saw schema changes and the flow has a
    webhook, records the ``schema.changed`` call (once per run) and queues it once the
    transaction commits; None otherwise."""
    if not SchemaChangeRecord.objects.filter(run=run).exists():
        return None
    notify = DataFlow.objects.filter(pk=run.flow_id).values_list("notify", flat=True).first() or {}
    if not notify.get("webhook"):
        return None
    delivery, created = WebhookDelivery.objects.get_or_create(
        run_id=run.pk, event=SCHEMA_CHANGED, defaults={"flow_id": run.flow_id, "url": notify["webhook"]}
    )
    if not created:
        return None
    transaction.on_commit(lambda: current_app.send_task(WEBHOOK_DELIVER, args=[delivery.pk]), robust=True)
    return delivery
