from django.core.management.base import CommandError

from dataflow.management.base import DataflowCommand
from dataflow.management.lookup import flow_named
from dataflow.services.errors import FlowStateError
from dataflow.services.flows import flow_resume, flow_start
from source_support.errors import ConfigError


class Command(DataflowCommand):
    help = "Starts a run of a flow on the worker fleet (celery worker + beat must be running)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument(
            "--resume",
            action="store_true",
            help="resume the flow's stopped run from its checkpoints instead of starting a new one",
        )

    def handle(self, *args, name, resume, **options):
        flow = flow_named(name)
        try:
            run = flow_resume(flow=flow) if resume else flow_start(flow=flow)
        except (ConfigError, FlowStateError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{'resumed' if resume else 'started'} run {run.pk} of {name}")
