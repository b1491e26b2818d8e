"""What flows did: runs (with live progress), splits, dead letters and assignments. These
are records, not settings: read-only (a dead letter may be discarded)."""

from __future__ import annotations

import json

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from django.urls import path, reverse
from django.utils.html import format_html

from dataflow.admin.flows import ADMIN_MEDIA_CSS
from dataflow.admin.progress import duration_text, number_text, progress_panel
from dataflow.models import Assignment, DeadLetter, FlowRun, Split
from dataflow.services.admin_support import run_duration_s, run_live, runs_with_live_counters, split_share


class ReadOnlyAdmin(admin.ModelAdmin):
    """Pages that show rows and change nothing: no add, no save, no delete."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def _pretty_json(value) -> str:
    return format_html(
        '<pre class="adf-json">{}</pre>', json.dumps(value, indent=2, sort_keys=True, default=str)
    )


@admin.register(FlowRun)
class FlowRunAdmin(ReadOnlyAdmin):
    list_display = ["id", "flow", "status", "records", "errors", "rows_written", "started_at", "duration"]
    list_filter = ["status", "flow"]
    list_select_related = ["flow"]
    fieldsets = [
        (
            "Run",
            {
                "fields": [
                    "flow",
                    "status",
                    "trigger",
                    "message",
                    "started_at",
                    "paused_at",
                    "transform_started_at",
                    "finished_at",
                ]
            },
        ),
        (
            "Details",
            {
                "fields": [
                    "uid",
                    "spark_app_id",
                    "schema_ddl",
                    "settings",
                    "reader_failures",
                    "transform_attempts",
                ],
                "classes": ["collapse"],
            },
        ),
    ]
    readonly_fields = [
        "flow",
        "status",
        "trigger",
        "message",
        "started_at",
        "paused_at",
        "transform_started_at",
        "finished_at",
        "uid",
        "spark_app_id",
        "schema_ddl",
        "settings",
        "reader_failures",
        "transform_attempts",
    ]

    class Media:
        js = ["dataflow/admin/progress.js"]
        css = ADMIN_MEDIA_CSS

    def get_queryset(self, request):
        return runs_with_live_counters(super().get_queryset(request))

    @admin.display(description="records", ordering="live_records")
    def records(self, run: FlowRun) -> str:
        return number_text(run.live_records)

    @admin.display(description="errors", ordering="live_errors")
    def errors(self, run: FlowRun) -> str:
        return number_text(run.live_errors)

    @admin.display(description="duration")
    def duration(self, run: FlowRun) -> str:
        return duration_text(run_duration_s(started_at=run.started_at, finished_at=run.finished_at))

    @admin.display(description="settings the run started with")
    def settings(self, run: FlowRun) -> str:
        return _pretty_json(run.spec)

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("<path:object_id>/progress/", wrap(self.progress_view), name="dataflow_flowrun_progress"),
            *super().get_urls(),
        ]

    def progress_view(self, request, object_id: str):
        """The run's live progress as JSON (``admin_support.run_live``), polled by its pages."""
        run = self.get_object(request, unquote(object_id))
        if run is None:
            raise Http404(f"no run with id {object_id!r}")
        if not self.has_view_permission(request, run):
            raise PermissionDenied
        return JsonResponse(run_live(run=run))

    def change_view(self, request, object_id, form_url="", extra_context=None):
        run = self.get_object(request, unquote(object_id))
        context = dict(extra_context or {})
        if run is not None:
            context["progress"] = progress_panel(run_live(run=run), heading="Progress", link_run=False)
        return super().change_view(request, object_id, form_url, extra_context=context)


@admin.register(Split)
class SplitAdmin(ReadOnlyAdmin):
    list_display = [
        "split_id",
        "run",
        "status",
        "progress",
        "records_read",
        "errors_count",
        "owner_subtask",
        "updated_at",
    ]
    list_filter = ["status"]
    list_select_related = ["run__flow"]
    search_fields = ["split_id"]
    fields = [
        "run",
        "split_id",
        "status",
        "progress",
        "position",
        "records_read",
        "bytes_read",
        "batches",
        "errors_count",
        "owner_subtask",
        "error",
        "split_payload",
        "updated_at",
    ]
    readonly_fields = fields

    class Media:
        css = ADMIN_MEDIA_CSS

    @admin.display(description="progress")
    def progress(self, split: Split) -> str:
        share = split_share(split=split)
        if share is None:
            return "—"
        percent = round(share * 100)
        return format_html(
            '<progress max="100" value="{}" aria-label="{}% read"></progress> {}%', percent, percent, percent
        )

    @admin.display(description="payload")
    def split_payload(self, split: Split) -> str:
        return _pretty_json(split.payload)


@admin.register(DeadLetter)
class DeadLetterAdmin(ReadOnlyAdmin):
    """Records that could not be parsed; discarding one (delete) is allowed."""

    list_display = ["id", "flow", "run_link", "split_id", "offset", "line", "error", "created_at"]
    list_filter = ["flow"]
    list_select_related = ["flow"]
    search_fields = ["error", "split_id"]
    readonly_fields = [f.name for f in DeadLetter._meta.fields]

    def has_delete_permission(self, request, obj=None):
        # Skip the base's refusal: discarding a dead letter is the model's delete permission.
        return super(ReadOnlyAdmin, self).has_delete_permission(request, obj)

    @admin.display(description="run", ordering="run_id")
    def run_link(self, letter: DeadLetter) -> str:
        return format_html(
            '<a href="{}">run {}</a>',
            reverse("admin:dataflow_flowrun_change", args=[letter.run_id]),
            letter.run_id,
        )


@admin.register(Assignment)
class AssignmentAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "split",
        "subtask",
        "reader_location",
        "start_position",
        "end_position",
        "outcome",
        "assigned_at",
        "ended_at",
    ]
    list_filter = ["outcome"]
    list_select_related = ["split"]
    readonly_fields = [f.name for f in Assignment._meta.fields]
