from dataflow.management.base import DataflowCommand
from dataflow.selectors.flows import flow_health_lines, flow_list
from dataflow.selectors.runs import run_progress


class Command(DataflowCommand):
    help = "Lists flows with their status and the counters of their latest run."

    def handle(self, *args, **options):
        header = f"{'NAME':<28} {'STATUS':<10} {'RUN':>5} {'RUN STATUS':<13} {'READ':>12} {'ERRORS':>8} {'WRITTEN':>12}"
        self.stdout.write(header)
        for flow, run in flow_list():
            if run is None:
                self.stdout.write(f"{flow.name:<28} {flow.status:<10} {'-':>5}")
                self._health(flow)
                continue
            progress = run_progress(run_id=run.pk)
            written = "-" if progress.rows_written is None else progress.rows_written
            self.stdout.write(
                f"{flow.name:<28} {flow.status:<10} {run.pk:>5} {run.status:<13} "
                f"{progress.records_read:>12} {progress.errors_count:>8} {written:>12}"
            )
            if progress.message:  # why it failed, or why an active run makes no progress
                self.stdout.write(f"    {progress.message}")
            self._health(flow)

    def _health(self, flow) -> None:
        """``[flow] freshness`` and ``disable_after_failures``, said only when they bite."""
        for line in flow_health_lines(flow=flow):
            self.stdout.write(f"    {line}")
