"""Secrets at rest (dataflow/encryption.py): the rows stored in clear are encrypted with the
first key of DATAFLOW_SECRET_KEYS.

In three steps: the columns that held a bounded string become text (a sealed secret is
longer than the clear one: about 4/3 of it plus 100 characters); the clear secrets are
sealed, read and written through the plain fields of that state; the fields become the
sealed ones, which change nothing in the database.

Reversible with the keys: backwards, every secret is decrypted and stored in clear again
(and the columns bounded again). A secret that no key decrypts stops the reverse, naming
the row and the setting: it cannot be written back in clear without its key.
"""

from django.db import migrations, models

import dataflow.encryption
from dataflow.encryption import (
    SECRET_DEPTH,
    SETTING,
    Sealed,
    is_sealed,
    seal,
    sealed_notify,
    sealed_section,
    sealed_spec,
    undecryptable_fields,
    undecryptable_message,
    unsealed_json,
)

BATCH = 500


def _rows(model, *fields):
    return model.objects.order_by("pk").values_list("pk", *fields).iterator(chunk_size=BATCH)


def _text_sealed(value):
    return seal(value) if value and not is_sealed(value) else value


def seal_stored_secrets(apps, schema_editor):
    Connection = apps.get_model("dataflow", "Connection")
    DataFlow = apps.get_model("dataflow", "DataFlow")
    FlowRun = apps.get_model("dataflow", "FlowRun")
    WebhookDelivery = apps.get_model("dataflow", "WebhookDelivery")
    for pk, url, password in _rows(Connection, "url", "password"):
        Connection.objects.filter(pk=pk).update(url=_text_sealed(url), password=_text_sealed(password))
    for pk, url in _rows(WebhookDelivery, "url"):
        WebhookDelivery.objects.filter(pk=pk).update(url=_text_sealed(url))
    columns = ("source_type", "source_config", "format_type", "format_options", "sink_type", "sink_config", "notify")
    for pk, source_type, source, format_type, options, sink_type, sink, notify in _rows(DataFlow, *columns):
        DataFlow.objects.filter(pk=pk).update(
            source_config=sealed_section("source", source_type, _kept(source)),
            format_options=sealed_section("format", format_type, _kept(options)),
            sink_config=sealed_section("sink", sink_type, _kept(sink)),
            notify=sealed_notify(_kept(notify)),
        )
    for pk, spec in _rows(FlowRun, "spec"):
        FlowRun.objects.filter(pk=pk).update(spec=sealed_spec(_kept(spec)))


def _kept(value, depth=0):
    """``value`` with what is sealed already marked so (a migration run again seals nothing
    twice), down to where secrets are sealed (``SECRET_DEPTH``)."""
    if depth > SECRET_DEPTH:
        return value
    if isinstance(value, dict):
        return {key: _kept(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [_kept(item, depth + 1) for item in value]
    return Sealed(value) if is_sealed(value) else value


def unseal_stored_secrets(apps, schema_editor):
    Connection = apps.get_model("dataflow", "Connection")
    DataFlow = apps.get_model("dataflow", "DataFlow")
    FlowRun = apps.get_model("dataflow", "FlowRun")
    WebhookDelivery = apps.get_model("dataflow", "WebhookDelivery")

    def clear(value, what, field):
        value = unsealed_json(value)
        refused = [f"{field}.{path}" if path else field for path in undecryptable_fields(value)]
        if refused:
            raise RuntimeError(
                undecryptable_message(what, refused)
                + f"; the migration cannot store it in clear without that key in {SETTING}"
            )
        return value

    for pk, url, password in _rows(Connection, "url", "password"):
        Connection.objects.filter(pk=pk).update(
            url=clear(url, f"connection {pk}", "url") or "",
            password=clear(password, f"connection {pk}", "password") or "",
        )
    for pk, url in _rows(WebhookDelivery, "url"):
        WebhookDelivery.objects.filter(pk=pk).update(url=clear(url, f"webhook delivery {pk}", "url"))
    json_columns = ("source_config", "format_options", "sink_config", "notify")
    for pk, *values in _rows(DataFlow, *json_columns):
        source, options, sink, notify = (
            clear(value, f"flow {pk}", column) for value, column in zip(values, json_columns, strict=True)
        )
        DataFlow.objects.filter(pk=pk).update(
            source_config=source, format_options=options, sink_config=sink, notify=notify
        )
    for pk, spec in _rows(FlowRun, "spec"):
        FlowRun.objects.filter(pk=pk).update(spec=clear(spec, f"run {pk}", "spec"))


class Migration(migrations.Migration):
    dependencies = [("dataflow", "0012_userquota")]

    operations = [
        # Step 1: room for sealed text.
        migrations.AlterField(model_name="connection", name="password", field=models.TextField(blank=True)),
        migrations.AlterField(model_name="webhookdelivery", name="url", field=models.TextField()),
        # Step 2: the clear rows sealed, through the plain fields.
        migrations.RunPython(seal_stored_secrets, unseal_stored_secrets, elidable=False),
        # Step 3: the sealed fields (nothing changes in the database).
        migrations.AlterField(
            model_name="connection",
            name="password",
            field=dataflow.encryption.SealedTextField(blank=True, max_length=1024),
        ),
        migrations.AlterField(model_name="connection", name="url", field=dataflow.encryption.SealedTextField()),
        migrations.AlterField(
            model_name="dataflow",
            name="format_options",
            field=dataflow.encryption.SealedJSONField(blank=True, default=dict, secrets="format"),
        ),
        migrations.AlterField(
            model_name="dataflow",
            name="notify",
            field=dataflow.encryption.SealedJSONField(blank=True, default=dict, secrets="notify"),
        ),
        migrations.AlterField(
            model_name="dataflow",
            name="sink_config",
            field=dataflow.encryption.SealedJSONField(default=dict, secrets="sink"),
        ),
        migrations.AlterField(
            model_name="dataflow",
            name="source_config",
            field=dataflow.encryption.SealedJSONField(default=dict, secrets="source"),
        ),
        migrations.AlterField(
            model_name="flowrun",
            name="spec",
            field=dataflow.encryption.SealedJSONField(default=dict, secrets="spec"),
        ),
        migrations.AlterField(
            model_name="webhookdelivery", name="url", field=dataflow.encryption.SealedTextField()
        ),
    ]
