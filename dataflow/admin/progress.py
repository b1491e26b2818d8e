"""A run's progress as the admin's pages show it: labelled values as text, formatted as
``progress.js`` formats them when it polls, so a value keeps its look when it updates."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

#: (field, label) in the order the panel lists them; the field names are those progress.js fills.
PROGRESS_FIELDS = (
    ("status", "status"),
    ("records_read", "records read"),
    ("splits", "splits finished"),
    ("records_per_s", "records/s"),
    ("lag", "lag"),
    ("errors_count", "errors"),
    ("rows_written", "rows written"),
    ("duration", "duration"),
    ("message", "message"),
)
NONE_TEXT = "—"


def number_text(value: float | int | None) -> str:
    return NONE_TEXT if value is None else f"{round(value):,}"


def duration_text(seconds: float | None) -> str:
    """12 s, 3 min 4 s, 2 h 5 min."""
    if seconds is None:
        return NONE_TEXT
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def progress_texts(live: dict[str, Any]) -> dict[str, str]:
    """Each field's text for ``selectors.runs.run_live``'s dict."""
    run, rate = live["run"], live["rate"] or {}
    return {
        "status": f"{run['status']} (paused)" if run["paused"] else run["status"],
        "records_read": number_text(run["records_read"]),
        "splits": f"{run['splits_finished']:,} / {run['splits_total']:,}",
        "records_per_s": number_text(rate.get("records_per_s")),
        "lag": number_text(rate.get("lag")),
        "errors_count": number_text(run["errors_count"]),
        "rows_written": number_text(run["rows_written"]),
        "duration": duration_text(run["duration_s"]),
        "message": run["message"] or NONE_TEXT,
    }


def progress_panel(live: dict[str, Any], *, heading: str, link_run: bool) -> dict[str, Any]:
    """The context of ``admin/dataflow/includes/run_progress.html`` for a run."""
    run_id = live["run"]["id"]
    texts = progress_texts(live)
    return {
        "heading": heading,
        "run": live["run"],
        "fields": [{"name": name, "label": label, "text": texts[name]} for name, label in PROGRESS_FIELDS],
        "progress_url": reverse("admin:dataflow_flowrun_progress", args=[run_id]),
        "run_url": reverse("admin:dataflow_flowrun_change", args=[run_id]) if link_run else "",
        "splits_url": reverse("admin:dataflow_split_changelist") + f"?run__id__exact={run_id}",
        "dead_letters_url": reverse("admin:dataflow_deadletter_changelist") + f"?run__id__exact={run_id}",
    }
