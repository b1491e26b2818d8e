from django.core.management.base import CommandError

from dataflow.management.base import DataflowCommand
from dataflow.services.cleanup import cleanup_apply, cleanup_plan


class Command(DataflowCommand):
    help = (
        "Removes the landed files and rows of runs that ended more than DATAFLOW_RETENTION_DAYS "
        "ago (active runs and runs that can be resumed are kept, and listed with what they "
        "hold). Prints what it would remove; --apply removes it."
    )

    def add_arguments(self, parser):
        parser.add_argument("--apply", action="store_true", help="remove; without it nothing is removed")
        parser.add_argument("--older-than", type=float, metavar="DAYS", help="instead of the setting")

    def handle(self, *args, apply: bool, older_than: float | None, **options):
        if older_than is not None and older_than < 0:
            raise CommandError("--older-than: must be 0 or more days")
        plan = cleanup_plan(older_than_days=older_than)
        for line in plan.kept_lines():
            self.stdout.write(line)
        if not apply:
            self.stdout.write(f"would remove {plan.summary()} (ended before {plan.cutoff:%Y-%m-%d %H:%M}Z)")
            self.stdout.write("nothing removed; run with --apply to remove it")
            return
        done = cleanup_apply(plan=plan)
        self.stdout.write(f"removed {done.summary()}")
