from dataflow.management.base import DataflowCommand
from dataflow.management.lookup import flow_named
from dataflow.services.flows import flow_stop


class Command(DataflowCommand):
    help = "Stops the active run of a flow; its checkpoints and landed data are kept."

    def add_arguments(self, parser):
        parser.add_argument("name")

    def handle(self, *args, name, **options):
        flow = flow_named(name)
        run = flow_stop(flow=flow)
        if run is None:
            self.stdout.write(f"{name} is not running")
            return
        self.stdout.write(
            f"stopped run {run.pk} of {name}; its checkpoints are kept: resume it with "
            f"'manage.py startflow {name} --resume' or 'manage.py runflow {name}'"
        )
