"""``flowctl ACTION NAME``: steer one flow with the same service functions as the admin."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from dataflow.management.lookup import flow_named
from dataflow.selectors import run_progress
from dataflow.services.flows import FlowStateError, flow_rescale, flow_resume, flow_start, flow_stop
from dataflow.services.stream_runs import (
    checkpoints_of,
    flow_restore,
    offsets_of,
    offsets_reset,
    offsets_set,
)
from source_support.errors import ConfigError

ACTIONS = ("start", "stop", "resume", "status", "rescale", "offsets", "checkpoints", "restore")


class Command(BaseCommand):
    help = (
        "Steers one flow: start, stop, resume (a stopped run, from its checkpoints), status, "
        "rescale N (readers of a running flow), offsets (read; --set SPLIT=OFFSET, --reset on a "
        "stopped flow), checkpoints, restore [--checkpoint ID] (a new run from a checkpoint)."
    )

    def add_arguments(self, parser):
        parser.add_argument("action", choices=ACTIONS)
        parser.add_argument("name")
        parser.add_argument("count", nargs="?", type=int, help="rescale: the new parallelism")
        parser.add_argument("--json", action="store_true", help="print JSON for scripts")
        parser.add_argument(
            "--set", action="append", default=[], metavar="SPLIT=OFFSET", help="offsets: move a split"
        )
        parser.add_argument("--reset", action="store_true", help="offsets: read from source.start again")
        parser.add_argument("--checkpoint", type=int, help="restore: the checkpoint id (default: the newest)")

    def handle(self, *args, action: str, name: str, **options):
        flow = flow_named(name)
        try:
            result = getattr(self, f"_{action}")(flow, options)
        except (ConfigError, FlowStateError) as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(json.dumps(result, indent=2, default=str))
        else:
            self.stdout.write(_as_text(result))

    def _start(self, flow, options) -> dict[str, Any]:
        run = flow_start(flow=flow)
        return {"flow": flow.name, "run": run.pk, "status": run.status}

    def _stop(self, flow, options) -> dict[str, Any]:
        run = flow_stop(flow=flow)
        if run is None:
            raise FlowStateError(f"flow {flow.name!r} has no active run")
        return {"flow": flow.name, "run": run.pk, "status": "stopped"}

    def _resume(self, flow, options) -> dict[str, Any]:
        run = flow_resume(flow=flow)
        return {"flow": flow.name, "run": run.pk, "status": run.status}

    def _status(self, flow, options) -> dict[str, Any]:
        flow.refresh_from_db()
        run = flow.runs.order_by("-id").first()
        out: dict[str, Any] = {"flow": flow.name, "status": flow.status, "run": None}
        if run is not None:
            progress = run_progress(run_id=run.pk)
            out["run"] = {"id": run.pk, **progress.__dict__}
            out["splits"] = offsets_of(flow=flow)
        return out

    def _rescale(self, flow, options) -> dict[str, Any]:
        if options["count"] is None:
            raise CommandError("rescale needs the new parallelism: flowctl rescale NAME N")
        run = flow_rescale(flow=flow, parallelism=options["count"])
        return {"flow": flow.name, "parallelism": options["count"], "run": run.pk if run else None}

    def _offsets(self, flow, options) -> Any:
        if options["reset"]:
            offsets_reset(flow=flow)
            return {"flow": flow.name, "offsets": "reset: the next run reads from source.start"}
        if options["set"]:
            moves = dict(_split_assignment(item) for item in options["set"])
            return offsets_set(flow=flow, positions=moves)
        return offsets_of(flow=flow)

    def _checkpoints(self, flow, options) -> list[dict[str, Any]]:
        return [
            {
                "id": c.pk,
                "run": c.run_id,
                "created_at": c.created_at.isoformat(),
                "records_read": c.records_read,
                "splits": len(c.splits),
            }
            for c in checkpoints_of(flow=flow)
        ]

    def _restore(self, flow, options) -> dict[str, Any]:
        run = flow_restore(flow=flow, checkpoint_id=options["checkpoint"])
        return {"flow": flow.name, "run": run.pk, "status": run.status}


def _split_assignment(item: str) -> tuple[str, str]:
    split_id, sep, offset = item.rpartition("=")
    if not sep or not split_id:
        raise CommandError(f"--set {item!r}: expected SPLIT=OFFSET (e.g. orders:1=1700000000000-0)")
    return split_id, offset


def _as_text(result: Any) -> str:
    """A table for lists of rows, ``key: value`` lines otherwise."""
    if isinstance(result, list):
        if not result:
            return "(none)"
        keys = list(result[0])
        rows = [[str(row.get(k, "")) for k in keys] for row in result]
        widths = [max(len(k), *(len(r[i]) for r in rows)) for i, k in enumerate(keys)]
        lines = ["  ".join(k.ljust(w) for k, w in zip(keys, widths, strict=True))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
        return "\n".join(lines)
    return "\n".join(
        f"{k}: {json.dumps(v, default=str) if isinstance(v, dict | list) else v}" for k, v in result.items()
    )
