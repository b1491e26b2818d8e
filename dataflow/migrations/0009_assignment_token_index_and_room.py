"""Assignments: one plain index on the reader's token (no pattern index), and room on each
PostgreSQL page so that ending an assignment updates its row in place (a HOT update
writes no index entry)."""

from django.db import migrations, models


def leave_room_on_pages(apps, schema_editor):
    # An assignment is written twice (assigned, then ended), and neither write changes an
    # indexed column; with half of each page free, the second write stays on the row's
    # page and touches no index. PostgreSQL only (SQLite has no fill factor).
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE dataflow_assignment SET (fillfactor = 50)")


def fill_pages(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE dataflow_assignment RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [
        ("dataflow", "0008_connections"),
    ]

    operations = [
        migrations.AlterField(
            model_name="assignment",
            name="reader_token",
            field=models.CharField(max_length=64),
        ),
        migrations.AddIndex(
            model_name="assignment",
            index=models.Index(fields=["reader_token"], name="assignment_reader_token"),
        ),
        migrations.RunPython(leave_room_on_pages, fill_pages),
    ]
