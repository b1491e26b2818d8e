"""What every command of the app shares."""

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, OperationalError, ProgrammingError, connections
from django.db.migrations.executor import MigrationExecutor


class DataflowCommand(BaseCommand):
    """A command of the app. A database that was never migrated, or is behind the code,
    fails the command with the one that fixes it, not with a traceback of a missing table
    (``no such table: dataflow_dataflow``): the ordinary mistake of a first try, or of a new
    database next to an old checkout. Migrations are looked at only once a query failed."""

    def execute(self, *args, **options):
        try:
            return super().execute(*args, **options)
        except (OperationalError, ProgrammingError) as exc:
            behind = unapplied_migrations()
            if not behind:
                raise
            raise CommandError(
                f"the database ({database_name()}) is missing {len(behind)} migration(s), so it lacks "
                f"tables ({str(exc).strip().splitlines()[0]}): run `python manage.py migrate` first"
            ) from exc


def unapplied_migrations() -> list[str]:
    """The migrations not applied to the default database ("app.name"), in order."""
    connection = connections[DEFAULT_DB_ALIAS]
    try:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except (OperationalError, ProgrammingError):
        return []  # the database itself is away: the first error says so
    return [f"{migration.app_label}.{migration.name}" for migration, _ in plan]


def database_name() -> str:
    settings = connections[DEFAULT_DB_ALIAS].settings_dict
    return f"{settings['ENGINE'].rsplit('.', 1)[-1]} {settings['NAME']}"
