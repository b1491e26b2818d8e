from django.core.management.base import BaseCommand, CommandError

from dataflow.models import DataFlow
from dataflow.services.flows import flow_stop


class Command(BaseCommand):
    help = "Stops the active run of a flow; its checkpoints and landed data are kept."

    def add_arguments(self, parser):
        parser.add_argument("name")

    def handle(self, *args, name, **options):
        flow = DataFlow.objects.filter(name=name).first()
        if flow is None:
            raise CommandError(f"no flow named {name!r} (see: manage.py flows)")
        run = flow_stop(flow=flow)
        self.stdout.write(f"stopped run {run.pk} of {name}" if run else f"{name} is not running")
