"""Per-user quotas (``models.UserQuota``) over the ``DATAFLOW_USER_QUOTAS`` defaults, and a
user's own split ceiling over ``DATAFLOW_MAX_SPLITS_PER_FLOW``."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("dataflow", "0011_deployment"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="UserQuota",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("flows", models.PositiveIntegerField(blank=True, help_text="flows the user may own", null=True)),
                ("schedules", models.PositiveIntegerField(blank=True, help_text="of them with a [schedule]", null=True)),
                ("min_schedule_seconds", models.PositiveIntegerField(blank=True, help_text="the shortest schedule.every", null=True)),
                ("concurrent_runs", models.PositiveIntegerField(blank=True, help_text="runs active at once", null=True)),
                ("splits", models.PositiveIntegerField(blank=True, help_text="splits over the user's active runs", null=True)),
                (
                    "max_splits_per_flow",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="The most splits one run of this user's flows may have (empty: DATAFLOW_MAX_SPLITS_PER_FLOW).",
                        null=True,
                    ),
                ),
                (
                    "user",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="dataflow_quota",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
    ]
