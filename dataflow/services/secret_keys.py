"""Rotating the keys of the secrets at rest (``dataflow.encryption``): every stored secret
re-encrypted with the first key of ``DATAFLOW_SECRET_KEYS``, what ``flowctl
rotate-secrets`` runs (docs/deployment.md, "Secret keys")."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models, transaction

from dataflow.encryption import (
    SETTING,
    SecretUndecryptable,
    count_sealed,
    field_sealed,
    sealed_fields,
    undecryptable_fields,
    undecryptable_message,
)
from dataflow.models import Connection, DataFlow, FlowRun, WebhookDelivery

#: Every table with secrets, by the name a report gives it.
SEALED_MODELS: dict[str, type[models.Model]] = {
    "connections": Connection,
    "flows": DataFlow,
    "runs": FlowRun,
    "webhook_deliveries": WebhookDelivery,
}
BATCH = 500
#: The most rows a refused rotation names.
MAX_NAMED = 20


@dataclass(frozen=True)
class RotationReport:
    """What ``secrets_rotate`` re-encrypted: the secrets of each table, and in how many rows."""

    secrets: dict[str, int]
    rows: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.secrets.values())


def secrets_rotate() -> RotationReport:
    """Re-encrypts every stored secret (connections, flows, runs, webhook deliveries) with
    the first key of ``DATAFLOW_SECRET_KEYS``; secrets stored in clear (written before
    they were encrypted) are encrypted too. Each row is rewritten in a short transaction
    of its own, under its row lock, so a run that goes on meanwhile loses no change;
    running it again re-encrypts again and changes nothing else.

    First every secret is read: if one cannot be decrypted with any of the keys, nothing
    is changed and ``SecretUndecryptable`` names the rows (up to 20) and the setting."""
    refused: list[str] = []
    for name, model in SEALED_MODELS.items():
        fields = sealed_fields(model)
        for row in model.objects.order_by("pk").iterator(chunk_size=BATCH):
            bad = [
                f"{field.name}.{path}" if path else field.name
                for field in fields
                for path in undecryptable_fields(getattr(row, field.attname))
            ]
            if bad:
                refused.append(f"{name.replace('_', ' ')} {_row_name(row)} ({', '.join(bad)})")
    if refused:
        more = f" and {len(refused) - MAX_NAMED} more" if len(refused) > MAX_NAMED else ""
        raise SecretUndecryptable(
            SETTING,
            undecryptable_message("rotate-secrets", ["; ".join(refused[:MAX_NAMED]) + more])
            + "; nothing was changed",
        )
    secrets: dict[str, int] = {}
    rows: dict[str, int] = {}
    for name, model in SEALED_MODELS.items():
        secrets[name], rows[name] = _rotate_table(model)
    return RotationReport(secrets=secrets, rows=rows)


def _rotate_table(model: type[models.Model]) -> tuple[int, int]:
    fields = sealed_fields(model)
    secrets = rows = 0
    pks = list(model.objects.order_by("pk").values_list("pk", flat=True))
    for start in range(0, len(pks), BATCH):
        with transaction.atomic():
            for row in model.objects.select_for_update().filter(pk__in=pks[start : start + BATCH]):
                sealed = {field.attname: field_sealed(field, row) for field in fields}
                count = sum(count_sealed(value) for value in sealed.values())
                if count:
                    model.objects.filter(pk=row.pk).update(**sealed)
                    secrets, rows = secrets + count, rows + 1
    return secrets, rows


def _row_name(row: models.Model) -> str:
    name = getattr(row, "name", None)
    return repr(name) if isinstance(name, str) else str(row.pk)
