"""``flowctl ACTION NAME``: steer one flow with the same service functions as the admin;
``flowctl rotate-secrets``: re-encrypt every stored secret with the first key."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from dataflow.management.base import DataflowCommand
from dataflow.management.lookup import flow_named
from dataflow.models import DataFlow, FlowRun
from dataflow.selectors.flows import flow_dead_letters, flow_runs, flow_status, slots_visible
from dataflow.services.checkpoints import checkpoints_of
from dataflow.services.connection_test import flow_check
from dataflow.services.errors import FlowStateError
from dataflow.services.flow_tests import flow_tests_run
from dataflow.services.flows import (
    flow_delete,
    flow_input_check,
    flow_pause,
    flow_rescale,
    flow_restart,
    flow_restore,
    flow_resume,
    flow_start,
    flow_stop,
)
from dataflow.services.health import flows_health_check
from dataflow.services.offsets import offsets_of, offsets_reset, offsets_set
from dataflow.services.preview import flow_preview
from dataflow.services.schema_changes import run_schema_changes
from dataflow.services.secret_keys import secrets_rotate
from dataflow.services.slots import slot_drop
from dataflow.services.specs import flow_spec_of, flow_spec_validate
from dataflow.services.toml_export import flow_toml
from dataflow.services.toml_import import flow_spec_from_toml_bytes
from source_support.errors import ConfigError

ACTIONS = (
    "start",
    "stop",
    "pause",
    "resume",
    "restart",
    "status",
    "runs",
    "dead-letters",
    "validate",
    "export",
    "rescale",
    "offsets",
    "checkpoints",
    "restore",
    "delete",
    "preview",
    "check",
    "rotate-secrets",
    "test",
    "slots",
    "health",
)
#: Actions whose NAME may be a TOML file as well as a stored flow.
FILE_ACTIONS = ("validate", "preview", "check")
#: Actions on the deployment, not on one flow: they take no NAME.
DEPLOYMENT_ACTIONS = ("rotate-secrets", "slots", "health")
#: Columns of ``dead-letters``'s table, in the order shown.
DEAD_LETTER_COLUMNS = ("id", "run", "expectation", "offset", "line", "error", "raw")
#: Columns of ``status``'s split table, in the order shown.
SPLIT_COLUMNS = ("split_id", "state", "reader", "offset", "records_read", "errors_count", "lag", "error")


class Command(DataflowCommand):
    help = (
        "Steers one flow: start, stop, pause (hold its readers), resume (a paused run, or a stopped "
        "one from its checkpoints), restart [--only-failed] (a new run, or only the latest run's "
        "failed splits), status, runs (newest first), dead-letters [--limit N] (oldest first), validate (NAME: a TOML file or a flow; exit "
        "code 1 if invalid), export (the flow as TOML for applyflows), rescale N (readers of a "
        "running flow), offsets (read; --set SPLIT=OFFSET, --reset on a stopped flow), checkpoints, "
        "restore [--checkpoint ID] (a new run from a checkpoint), test FILE... (the [[test]] of flow files: "
        "exit code 1 if one fails), delete [--delete-output] (the flow; its "
        "sink directory stays its owner's unless --delete-output removes it); preview [--limit N] "
        "[--from latest] (NAME: a TOML file or a flow; its transform over real records, nothing "
        "written); check (NAME: a TOML file or a flow; what its source and sink reach now; exit "
        "code 1 if one fails); slots (no NAME: the replication slots the cdc flows own, their lag, "
        "and adf_ slots no flow owns; --user U: as U sees them; --drop SLOT: drop one left behind); "
        "rotate-secrets (no NAME: "
        "every stored secret encrypted again with the first key of DATAFLOW_SECRET_KEYS); health (no NAME: "
        "the [flow] freshness check beat runs each minute, now). --json prints "
        "JSON for scripts."
    )

    def add_arguments(self, parser):
        parser.add_argument("action", choices=ACTIONS)
        parser.add_argument(
            "name",
            nargs="?",
            help="the flow's name (validate: also a TOML file; rotate-secrets, slots, health: none)",
        )
        parser.add_argument(
            "more", nargs="*", metavar="N|FILE", help="rescale: the new parallelism; test: more flow files"
        )
        parser.add_argument("--json", action="store_true", help="print JSON for scripts")
        parser.add_argument(
            "--only-failed", action="store_true", help="restart: read only the failed splits again"
        )
        parser.add_argument(
            "--limit",
            type=int,
            help="runs: how many of the newest (50); dead-letters: of the oldest (50); preview: records to read (100)",
        )
        parser.add_argument(
            "--from",
            dest="start",
            choices=["start", "latest"],
            help="preview: a stream's first or newest records",
        )
        parser.add_argument(
            "--timeout", type=float, help="preview (10), check (5): seconds the source may take"
        )
        parser.add_argument(
            "--reveal-secrets", action="store_true", help="export: secrets as stored, not masked"
        )
        parser.add_argument(
            "--set", action="append", default=[], metavar="SPLIT=OFFSET", help="offsets: move a split"
        )
        parser.add_argument("--reset", action="store_true", help="offsets: read from source.start again")
        parser.add_argument("--checkpoint", type=int, help="restore: the checkpoint id (default: the newest)")
        parser.add_argument("--user", help="slots: list as this user sees them (default: the operator)")
        parser.add_argument("--drop", metavar="SLOT", help="slots: drop this slot, left behind (staff only)")
        parser.add_argument(
            "--delete-output",
            action="store_true",
            help="delete: remove the flow's sink directory too (else it is kept, and stays the owner's)",
        )

    def handle(self, *args, action: str, name: str | None, **options):
        if (name is None) != (action in DEPLOYMENT_ACTIONS):
            raise CommandError(
                f"{action} takes no flow name"
                if name is not None
                else f"{action} needs a flow name: flowctl {action} NAME"
            )
        try:
            if action == "rotate-secrets":
                result = self._rotate_secrets(options)
            elif action == "slots":
                result = self._slots(options)
            elif action == "health":
                result = self._health(options)
            elif action in FILE_ACTIONS:
                assert name is not None
                result = getattr(self, f"_{action}")(name, options)
            elif action == "test":
                assert name is not None
                result = self._test([name, *options["more"]])
            else:
                assert name is not None
                result = getattr(self, f"_{action.replace('-', '_')}")(flow_named(name), options)
        except (ConfigError, FlowStateError) as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(json.dumps(result, indent=2, default=str))
        else:
            self.stdout.write(_TEXT.get(action, _as_text)(result))
        if action == "validate" and not result["valid"]:
            raise CommandError(f"{result['field']}: {result['error']}")  # exit code 1
        if action == "test" and result["failed"]:
            raise CommandError(
                f"{result['failed']} of {len(result['tests'])} flow tests failed"
            )  # exit code 1
        if action == "check" and not all(section["ok"] for section in result):  # pyright: ignore[reportCallIssue, reportArgumentType] - check's result is a list of sections
            raise CommandError("a connection test failed")  # exit code 1

    def _start(self, flow, options) -> dict[str, Any]:
        run = flow_start(flow=flow)
        return {"flow": flow.name, "run": run.pk, "status": run.status}

    def _stop(self, flow, options) -> dict[str, Any]:
        run = flow_stop(flow=flow)
        if run is None:
            raise FlowStateError(f"flow {flow.name!r} has no active run")
        return {"flow": flow.name, "run": run.pk, "status": "stopped"}

    def _pause(self, flow, options) -> dict[str, Any]:
        run = flow_pause(flow=flow)
        return {"flow": flow.name, "run": run.pk, "status": "paused"}

    def _resume(self, flow, options) -> dict[str, Any]:
        run = flow_resume(flow=flow)
        return {"flow": flow.name, "run": run.pk, "status": run.status}

    def _restart(self, flow, options) -> dict[str, Any]:
        run = flow_restart(flow=flow, only_failed=options["only_failed"])
        return {"flow": flow.name, "run": run.pk, "status": run.status, "only_failed": options["only_failed"]}

    def _delete(self, flow, options) -> dict[str, Any]:
        flow_delete(flow=flow, delete_output=options["delete_output"])
        return {"flow": flow.name, "deleted": True, "output_deleted": options["delete_output"]}

    def _status(self, flow, options) -> dict[str, Any]:
        flow.refresh_from_db()
        status = flow_status(flow=flow)
        run = FlowRun.objects.filter(pk=status["run"]["id"]).first() if status["run"] else None
        status["schema_changes"] = run_schema_changes(run) if run is not None else []
        return status

    def _runs(self, flow, options) -> list[dict[str, Any]]:
        return flow_runs(flow=flow, limit=options["limit"] or 50)

    def _dead_letters(self, flow, options) -> list[dict[str, Any]]:
        letters = flow_dead_letters(flow=flow)[: options["limit"] or 50]
        return [
            {name: getattr(letter, name) for name in DEAD_LETTER_COLUMNS} | {"run": letter.run_id}
            for letter in letters
        ]

    def _preview(self, name: str, options) -> dict[str, Any]:
        spec, owner = _spec_and_owner(name)
        return flow_preview(
            spec=spec,
            owner=owner,
            limit=options["limit"],
            timeout_s=options["timeout"],
            start=options["start"],
        )

    def _check(self, name: str, options) -> list[dict[str, Any]]:
        spec, owner = _spec_and_owner(name)
        return flow_check(flow_spec=spec, owner=owner, timeout_s=options["timeout"])

    def _validate(self, name: str, options) -> dict[str, Any]:
        """NAME is a TOML file if one is there (or it ends in .toml), else a stored flow."""
        try:
            spec, owner = _spec_and_owner(name)
            values = flow_spec_validate(spec, owner=owner)
            # The input as it is now: a schema inferred, headers checked.
            flow_input_check(values=values, owner=owner)
        except ConfigError as exc:
            return {"valid": False, "source": name, "field": exc.field, "error": exc.reason}
        return {"valid": True, "source": name, "flow": values["name"]}

    def _slots(self, options) -> dict[str, Any]:
        user = None
        if options["user"]:
            user = get_user_model().objects.filter(username=options["user"]).first()
            if user is None:
                raise CommandError(f"no user named {options['user']!r}")
        if options["drop"]:
            # The operator (no --user) acts as staff; a named user must be staff.
            return slot_drop(user=user or _Operator(), slot=options["drop"])
        return slots_visible(user=user, operator=user is None)

    def _health(self, options) -> dict[str, Any]:
        """Beat's freshness check (``flows_health_check``), run now: the flows it marked
        stale (each one's webhook told) and those fresh again."""
        changes = flows_health_check()
        return {"stale": changes.stale, "fresh": changes.fresh}

    def _rotate_secrets(self, options) -> dict[str, Any]:
        report = secrets_rotate()
        return {"secrets": report.total, "by_table": report.secrets, "rows": report.rows}

    def _export(self, flow, options) -> dict[str, Any]:
        return {"flow": flow.name, "toml": flow_toml(flow=flow, reveal_secrets=options["reveal_secrets"])}

    def _rescale(self, flow, options) -> dict[str, Any]:
        if len(options["more"]) != 1 or not options["more"][0].isdigit():
            raise CommandError("rescale needs the new parallelism: flowctl rescale NAME N")
        count = int(options["more"][0])
        run = flow_rescale(flow=flow, parallelism=count)
        return {"flow": flow.name, "parallelism": count, "run": run.pk if run else None}

    def _test(self, paths: list[str]) -> dict[str, Any]:
        """Runs the ``[[test]]`` of each flow file (``services.flow_tests``)."""
        results = [r for path in paths for r in flow_tests_run(path=Path(path))]
        return {
            "tests": [vars(r) for r in results],
            "passed": sum(r.passed for r in results),
            "failed": sum(not r.passed for r in results),
        }

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


class _Operator:
    """Whoever runs ``manage.py``: the deployment's operator, with staff's rights."""

    is_staff = True


def _slots_text(report: dict[str, Any]) -> str:
    columns = ["flow", "owner", "slot", "server", "database", "lag_bytes", "lag_seconds", "active", "error"]
    lines = [_table(report["slots"], columns) if report["slots"] else "no cdc flow owns a slot"]
    over = [s for s in report["slots"] if s["over_limit"]]
    for slot in over:
        lines.append(
            f"WARNING: slot {slot['slot']} of flow {slot['flow']} holds back {slot['lag_bytes']} bytes of WAL, "
            f"past DATAFLOW_POSTGRES_SLOT_MAX_LAG_MB ({report['max_lag_mb']:g})"
        )
    for slot in report["left_behind"]:
        lines.append(
            f"WARNING: slot {slot['slot']} on {slot['server']} (database {slot['database']}) is left behind: "
            f"no flow owns it, it holds back {slot['lag_bytes']} bytes of WAL; drop it with "
            f"`manage.py flowctl slots --drop {slot['slot']}`"
        )
    return "\n".join(lines)


def _spec_and_owner(name: str) -> tuple[dict[str, Any], Any]:
    """The spec NAME gives: a TOML file if one is there (or it ends in .toml), else a stored
    flow's; and its owner, the stored flow's of that name (None: the operator's), whose
    rules it is held to, as applyflows and a start would hold it."""
    is_file = os.path.exists(name) or name.endswith(".toml")
    spec = _read_toml(name) if is_file else flow_spec_of(flow_named(name))
    flow_table = spec.get("flow") if isinstance(spec, dict) else None
    named = flow_table.get("name") if isinstance(flow_table, dict) else None
    stored = DataFlow.objects.filter(name=named).first() if isinstance(named, str) else None
    return spec, stored.owner if stored else None


def _read_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ConfigError("file", f"{path}: {exc.strerror}") from None
    return flow_spec_from_toml_bytes(data)


def _split_assignment(item: str) -> tuple[str, str]:
    split_id, sep, offset = item.rpartition("=")
    if not sep or not split_id:
        raise CommandError(f"--set {item!r}: expected SPLIT=OFFSET (e.g. orders:1=1700000000000-0)")
    return split_id, offset


def _as_text(result: Any) -> str:
    """A table for lists of rows, ``key: value`` lines otherwise."""
    if isinstance(result, list):
        return _table(result, list(result[0]) if result else [])
    return "\n".join(
        f"{k}: {json.dumps(v, default=str) if isinstance(v, dict | list) else v}" for k, v in result.items()
    )


def _table(rows: list[dict[str, Any]], keys: list[str]) -> str:
    if not rows:
        return "(none)"
    cells = [[_cell(row.get(k)) for k in keys] for row in rows]
    widths = [max(len(k), *(len(r[i]) for r in cells)) for i, k in enumerate(keys)]
    lines = ["  ".join(k.ljust(w) for k, w in zip(keys, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if hasattr(value, "strftime"):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return str(value).splitlines()[0] if str(value) else ""


def _test_text(result: dict[str, Any]) -> str:
    lines = []
    for test in result["tests"]:
        lines.append(f"{'PASS' if test['passed'] else 'FAIL'}  {test['file']}: {test['name']}")
        lines += [f"      {line}" for line in test["report"].splitlines()]
    lines.append(f"{result['passed']} passed, {result['failed']} failed")
    return "\n".join(lines)


def _status_text(status: dict[str, Any]) -> str:
    lines = [f"flow: {status['flow']}", f"status: {status['status']}"]
    if status["stale"]:
        lines.append(f"stale: since {_cell(status['stale_since'])}")
    if status["schedule_paused"]:
        lines.append(status["schedule_paused"])  # "schedule paused: ...", its own key
    run = status["run"]
    if run is None:
        return "\n".join([*lines, "run: (none)"])
    paused = ", paused" if run["paused"] else ""
    lines += [
        f"run: {run['id']} {run['status']}{paused} (trigger {run['trigger']}, started {_cell(run['started_at'])})",
        f"splits: {run['splits_finished']}/{run['splits_total']} finished",
        f"records: {run['records_read']}  errors: {run['errors_count']}  rows: {_cell(run['rows_written'])}",
    ]
    if run["message"]:
        lines.append(f"message: {run['message']}")
    if run.get("slot"):
        lines.append(_slot_line(run["slot"]))
    if run.get("expectations"):
        lines += ["", _table(run["expectations"], ["name", "on_fail", "passed", "failed"])]
    if status["splits"]:
        lines += ["", _table(status["splits"], list(SPLIT_COLUMNS))]
    if status.get("schema_changes"):
        lines += ["", "schema changes:", _table(status["schema_changes"], list(SCHEMA_CHANGE_COLUMNS))]
    return "\n".join(lines)


def _slot_line(slot: dict[str, Any]) -> str:
    if not slot["found"]:
        return f"slot: {slot['slot']} on {slot['server']}: {slot['error']}"
    over = "  OVER DATAFLOW_POSTGRES_SLOT_MAX_LAG_MB" if slot["over_limit"] else ""
    return (
        f"slot: {slot['slot']} on {slot['server']}, lag {slot['lag_bytes']} bytes, "
        f"confirmed {slot['lag_seconds']:.0f} s ago, {'active' if slot['active'] else 'not active'}{over}"
    )


SCHEMA_CHANGE_COLUMNS = ("column", "kind", "old_type", "new_type", "policy", "records", "first_position")


RUN_COLUMNS = (
    "id",
    "status",
    "trigger",
    "records_read",
    "rows_written",
    "errors_count",
    "started_at",
    "duration_s",
)


def _preview_text(preview: dict[str, Any]) -> str:
    source, output, query = preview["source"], preview["output"], preview["query"]
    columns = ", ".join(f"{c['name']} {c['type']}" for c in preview["schema"])
    verdict = query["kind"] + (f" ({query['reason']})" if query["reason"] else "")
    lines = [
        f"flow: {preview['flow']}",
        f"source: {source['type']} from {source['from']}, {len(preview['records'])} records"
        + (f" (stopped at {source['truncated']})" if source["truncated"] else ""),
        f"schema ({preview['schema_origin']}): {columns}",
        f"query: {verdict}" + ("; a stream needs a [stop] rule for it" if query["needs_stop_rule"] else ""),
        "",
        "records:",
        _table(preview["records"], [c["name"] for c in preview["schema"]]),
        "",
        f"bad records: {len(preview['bad_records'])}",
    ]
    if preview["bad_records"]:
        lines.append(_table(preview["bad_records"], ["position", "line", "reason", "raw"]))
    lines += ["", "output:"]
    if output["error"]:
        lines.append(f"error: {output['error']}")
    else:
        lines.append(_table(output["rows"], [c["name"] for c in output["schema"]]))
    return "\n".join(lines)


def _check_text(sections: list[dict[str, Any]]) -> str:
    lines = []
    for section in sections:
        head = f"[{section['section']}] {section['type']}: "
        if section["ok"]:
            lines.append(head + "OK")
            lines += [f"  {line}" for line in section["found"]]
        else:
            lines.append(head + f"FAILED {section['field']}: {section['error']}")
    return "\n".join(lines)


_TEXT = {
    "status": _status_text,
    "slots": lambda r: f"dropped slot {r['dropped']} on {r['server']}" if "dropped" in r else _slots_text(r),
    "preview": _preview_text,
    "check": _check_text,
    "runs": lambda rows: _table(rows, list(RUN_COLUMNS)),
    "dead-letters": lambda rows: _table(rows, list(DEAD_LETTER_COLUMNS)),
    "validate": lambda r: f"OK: {r['source']} (flow {r['flow']})"
    if r["valid"]
    else f"invalid: {r['source']}",
    "export": lambda r: r["toml"].rstrip("\n"),
    "test": _test_text,
    "health": lambda r: "\n".join(
        [f"stale: {name}" for name in r["stale"]] + [f"fresh again: {name}" for name in r["fresh"]]
    )
    or "no flow became stale or fresh again",
    "rotate-secrets": lambda r: "\n".join(
        [f"re-encrypted {r['secrets']} secrets with the first key of DATAFLOW_SECRET_KEYS"]
        + [
            f"  {table.replace('_', ' ')}: {count} in {r['rows'][table]} rows"
            for table, count in r["by_table"].items()
        ]
    ),
}
