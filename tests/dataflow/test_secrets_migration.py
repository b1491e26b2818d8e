"""The migration that seals the secrets stored in clear before they were encrypted
(0013_secrets_sealed): forward, no secret is left in clear and the app reads each back;
backward (with the key), each is in clear again where it was."""

from __future__ import annotations

import pytest
from django.db import connection as db
from django.db.migrations.executor import MigrationExecutor

from dataflow.models import Connection, DataFlow, FlowRun, WebhookDelivery

BEFORE = [("dataflow", "0012_userquota")]
SEALED = [("dataflow", "0013_secrets_sealed")]
URL = "redis://:old-url-pw-0c4d@127.0.0.1:6399/0"
PASSWORD = "old-conn-pw-8e21"
WEBHOOK = "https://hooks.example.com/flows?token=old-hook-tok-77aa"
AWS_SECRET = "old-aws-secret-19bd"
SECRETS = ("old-url-pw-0c4d", PASSWORD, "old-hook-tok-77aa", AWS_SECRET)


def _migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(db)
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor


def _stored_text() -> str:
    with db.cursor() as cursor:
        cursor.execute(
            "SELECT concat_ws(' ', c.url, c.password, f.source_config::text, f.notify::text,"
            " r.spec::text, d.url) FROM dataflow_connection c, dataflow_dataflow f, dataflow_flowrun r,"
            " dataflow_webhookdelivery d"
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_the_migration_seals_clear_secrets_and_clears_them_again_backwards():
    executor = _migrate(BEFORE)
    try:
        apps = executor.loader.project_state(BEFORE).apps
        source = {"streams": "orders:*", "url": URL}
        s3 = {"bucket": "events", "access_key_id": "AKIDEXAMPLE", "secret_access_key": AWS_SECRET}
        apps.get_model("dataflow", "Connection").objects.create(
            name="old", type="redis", url=URL, password=PASSWORD
        )
        flow = apps.get_model("dataflow", "DataFlow").objects.create(
            name="old-flow",
            source_type="redis_streams",
            source_config=source,
            format_type="fields",
            transform_sql="SELECT * FROM source",
            sink_type="parquet",
            sink_config={"path": "/srv/out/old"},
            notify={"webhook": WEBHOOK, "on": ["failed"]},
        )
        apps.get_model("dataflow", "DataFlow").objects.create(
            name="old-objects",
            source_type="s3",
            source_config=s3,
            format_type="csv",
            transform_sql="SELECT * FROM source",
            sink_type="parquet",
            sink_config={"path": "/srv/out/objects"},
        )
        run = apps.get_model("dataflow", "FlowRun").objects.create(
            flow=flow,
            spec={
                "name": "old-flow",
                "source_type": "redis_streams",
                "source_config": source,
                "sink_type": "parquet",
                "sink_config": {"path": "/srv/out/old"},
                "notify": {"webhook": WEBHOOK, "on": ["failed"]},
            },
        )
        apps.get_model("dataflow", "WebhookDelivery").objects.create(
            flow=flow, run=run, event="run.failed", url=WEBHOOK
        )
        assert all(secret in _stored_text() for secret in SECRETS[:3])

        _migrate(SEALED)

        stored = _stored_text()
        assert not [secret for secret in SECRETS if secret in stored]
        with db.cursor() as cursor:
            cursor.execute("SELECT source_config::text FROM dataflow_dataflow WHERE name = 'old-objects'")
            assert AWS_SECRET not in cursor.fetchone()[0]
        assert Connection.objects.get(name="old").password == PASSWORD
        assert Connection.objects.get(name="old").url == URL
        # Only the column read: at 0013 the table has none of the later migrations' columns.
        configs = dict(DataFlow.objects.values_list("name", "source_config"))
        assert configs["old-flow"]["url"] == URL
        assert configs["old-objects"]["secret_access_key"] == AWS_SECRET
        assert FlowRun.objects.values_list("spec", flat=True).get()["notify"]["webhook"] == WEBHOOK
        assert WebhookDelivery.objects.values_list("url", flat=True).get() == WEBHOOK

        _migrate(BEFORE)

        assert all(secret in _stored_text() for secret in SECRETS[:3])
    finally:
        _migrate(executor.loader.graph.leaf_nodes())
