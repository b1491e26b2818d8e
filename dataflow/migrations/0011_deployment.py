"""The deployment's identity (``models.Deployment``): a table of one row with a random id,
made here so that every process of a fleet reads the same id from its first task on."""

import uuid

from django.db import migrations, models


def create_identity(apps, schema_editor):
    schema_editor.execute(
        "CREATE TABLE IF NOT EXISTS dataflow_deployment (id smallint PRIMARY KEY, uid varchar(32) NOT NULL)"
    )
    schema_editor.execute(
        "INSERT INTO dataflow_deployment (id, uid) SELECT 1, %s"
        " WHERE NOT EXISTS (SELECT 1 FROM dataflow_deployment WHERE id = 1)",
        [uuid.uuid4().hex],
    )


def drop_identity(apps, schema_editor):
    schema_editor.execute("DROP TABLE IF EXISTS dataflow_deployment")


class Migration(migrations.Migration):
    dependencies = [
        ("dataflow", "0010_bounds_limits_claims_sample_index"),
    ]

    operations = [
        migrations.CreateModel(
            name="Deployment",
            fields=[
                ("id", models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False)),
                ("uid", models.CharField(max_length=32)),
            ],
            options={"db_table": "dataflow_deployment", "managed": False},
        ),
        migrations.RunPython(create_identity, drop_identity),
    ]
