import os
import tomllib

from django.core.management.base import CommandError

from dataflow.management.base import DataflowCommand
from dataflow.services.toml_import import flow_import, flow_spec_with_environment
from source_support.errors import ConfigError


class Command(DataflowCommand):
    help = (
        "Creates or updates flows from TOML files ([flow] [source] [format] [transform] [sink]); "
        "${NAME:-default} in a string is the environment variable NAME."
    )

    def add_arguments(self, parser):
        parser.add_argument("files", nargs="+", help="TOML files, one flow each")

    def handle(self, *args, files, **options):
        for path in files:
            try:
                with open(path, "rb") as f:
                    spec = tomllib.load(f)
            except OSError as exc:
                raise CommandError(f"{path}: {exc.strerror}") from None
            except tomllib.TOMLDecodeError as exc:
                raise CommandError(f"{path}: not valid TOML: {exc}") from None
            except RecursionError:
                # tomllib recurses per nested array or inline table
                raise CommandError(f"{path}: not a flow spec: its values are nested too deeply") from None
            try:
                # The operator's own file: ${NAME:-default} reads this process's environment.
                spec = flow_spec_with_environment(spec=spec, environ=os.environ)
                # As the admin's import: a secret an export masked keeps the stored one.
                flow, created = flow_import(spec=spec)
            except ConfigError as exc:
                raise CommandError(f"{path}: {exc}") from None
            self.stdout.write(f"{'created' if created else 'updated'} flow {flow.name}")
