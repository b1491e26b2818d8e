import uuid

from django.db import migrations, models


def give_runs_an_identity(apps, schema_editor):
    FlowRun = apps.get_model("dataflow", "FlowRun")
    for run in FlowRun.objects.filter(uid__isnull=True).only("pk").iterator():
        FlowRun.objects.filter(pk=run.pk).update(uid=uuid.uuid4())


class Migration(migrations.Migration):
    dependencies = [("dataflow", "0004_split_backlog")]

    operations = [
        migrations.AddField(
            model_name="dataflow",
            name="max_errors",
            field=models.PositiveIntegerField(default=1000),
        ),
        migrations.AddField(
            model_name="flowrun",
            name="uid",
            field=models.UUIDField(null=True, editable=False),
        ),
        migrations.RunPython(give_runs_an_identity, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="flowrun",
            name="uid",
            field=models.UUIDField(default=uuid.uuid4, unique=True, editable=False),
        ),
        migrations.AddField(
            model_name="flowrun",
            name="reader_failures",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="deadletter",
            name="line",
            field=models.BigIntegerField(null=True, blank=True),
        ),
    ]
