"""What flows did: runs (with live progress), splits, dead letters and assignments. These
are records, not settings: read-only (a dead letter may be discarded)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from django.shortcuts import redirect
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from dataflow.admin.flows import ADMIN_MEDIA_CSS
from dataflow.admin.progress import duration_text, number_text, progress_panel
from dataflow.models import Assignment, DataFlow, DeadLetter, FlowRun, Split, WebhookDelivery
from dataflow.selectors.runs import run_duration_s, run_live, run_message, runs_with_live_counters
from dataflow.selectors.splits import split_share
from dataflow.services.dead_letters import dead_letters_discard, dead_letters_replay
from dataflow.services.errors import FlowStateError
from dataflow.services.notify import webhook_url_masked
from dataflow.services.schema_changes import run_schema_changes
from dataflow.services.specs import spec_values_masked
from source_support.errors import ConfigError

if TYPE_CHECKING:
    from dataflow.admin.flows import RunWithLiveCounters


class ReadOnlyAdmin(admin.ModelAdmin):
    """Pages that show rows and change nothing: no add, no save, no delete."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def schema_changes_table(changes: list[dict]) -> str:
    """A run's schema changes as a small table (what the admin's run page and the
    dashboard show); "none" when there are none."""
    if not changes:
        return "none"
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        (
            (
                c["column"],
                c["kind"],
                c["old_type"],
                c["new_type"],
                c["policy"],
                c["first_position"],
                c["records"],
            )
            for c in changes
        ),
    )
    return format_html(
        '<table class="adf-schema-changes"><thead><tr><th>column</th><th>change</th><th>was</th>'
        "<th>now</th><th>policy</th><th>first seen</th><th>records</th></tr></thead><tbody>{}</tbody></table>",
        rows,
    )


def _pretty_json(value) -> str:
    return format_html(
        '<pre class="adf-json">{}</pre>', json.dumps(value, indent=2, sort_keys=True, default=str)
    )


RUN_FIELDS = (
    "flow",
    "status",
    "trigger",
    "message_now",
    "started_at",
    "paused_at",
    "transform_started_at",
    "finished_at",
    "schema_changes",
)
RUN_DETAIL_FIELDS = ("uid", "spark_app_id", "schema_ddl", "settings", "reader_failures", "transform_attempts")


@admin.register(FlowRun)
class FlowRunAdmin(ReadOnlyAdmin):
    list_display = ["id", "flow", "status", "records", "errors", "rows_written", "started_at", "duration"]
    list_filter = ["status", "flow"]
    list_select_related = ["flow"]
    fieldsets = [
        ("Run", {"fields": RUN_FIELDS}),
        ("Details", {"fields": RUN_DETAIL_FIELDS, "classes": ["collapse"]}),
    ]
    readonly_fields = [*RUN_FIELDS, *RUN_DETAIL_FIELDS]

    class Media:
        js = ["dataflow/admin/progress.js"]
        css = ADMIN_MEDIA_CSS

    def get_queryset(self, request):
        return runs_with_live_counters(super().get_queryset(request))

    @admin.display(description="records", ordering="live_records")
    def records(self, run: RunWithLiveCounters) -> str:
        return number_text(run.live_records)

    @admin.display(description="errors", ordering="live_errors")
    def errors(self, run: RunWithLiveCounters) -> str:
        return number_text(run.live_errors)

    @admin.display(description="message")
    def message_now(self, run: FlowRun) -> str:
        return run_message(run)

    @admin.display(description="schema changes")
    def schema_changes(self, run: FlowRun) -> str:
        return schema_changes_table(run_schema_changes(run))

    @admin.display(description="duration")
    def duration(self, run: FlowRun) -> str:
        return duration_text(run_duration_s(started_at=run.started_at, finished_at=run.finished_at))

    @admin.display(description="settings the run started with")
    def settings(self, run: FlowRun) -> str:
        return _pretty_json(spec_values_masked(run.spec))

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("<path:object_id>/progress/", wrap(self.progress_view), name="dataflow_flowrun_progress"),
            *super().get_urls(),
        ]

    def progress_view(self, request, object_id: str):
        """The run's live progress as JSON (``selectors.runs.run_live``), polled by its pages."""
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
    fields = (
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
    )
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
    """Records that could not be parsed. They may be discarded or replayed (into a run of
    their own), through the dead-letter services; nothing else changes them."""

    list_display = ["id", "flow", "run_link", "split_id", "offset", "line", "error", "created_at"]
    list_filter = ["flow"]
    list_select_related = ["flow"]
    search_fields = ["error", "split_id"]
    readonly_fields = [f.name for f in DeadLetter._meta.fields]
    actions = ["discard_selected", "replay_selected"]

    def has_delete_permission(self, request, obj=None):
        # Discarding is deleting, and takes what the API's discard takes: the permission
        # that changes flows (not delete_deadletter, which the API never asks for).
        return request.user.has_perm("dataflow.change_dataflow")

    def has_replay_permission(self, request) -> bool:
        # A replay runs the flow: it takes the permission that steers flows.
        return request.user.has_perm("dataflow.change_dataflow")

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # "discard" does it through the service
        return actions

    @admin.display(description="run", ordering="run_id")
    def run_link(self, letter: DeadLetter) -> str:
        return format_html(
            '<a href="{}">run {}</a>',
            reverse("admin:dataflow_flowrun_change", args=[letter.run_id]),
            letter.run_id,
        )

    def delete_model(self, request, obj):
        try:
            dead_letters_discard(flow=obj.flow, ids=[obj.pk])
        except (ConfigError, FlowStateError) as exc:
            # For response_delete, which the admin calls next with the same request and
            # nothing else from here: an attribute of our own, unknown to HttpRequest's type.
            request.dead_letter_refusal = str(exc)  # pyright: ignore[reportAttributeAccessIssue]

    def response_delete(self, request, obj_display, obj_id):
        refusal = getattr(request, "dead_letter_refusal", None)
        if refusal is None:
            return super().response_delete(request, obj_display, obj_id)
        self.message_user(request, f"Dead letter {obj_id} was not discarded: {refusal}", messages.ERROR)
        return redirect("admin:dataflow_deadletter_change", obj_id)

    @admin.action(description="Discard the selected dead letters", permissions=["delete"])
    def discard_selected(self, request, queryset):
        self._per_flow(
            request, queryset, dead_letters_discard, lambda discarded: f"{discarded} dead letter(s) discarded"
        )

    @admin.action(
        description="Replay the selected dead letters into their flow's sink", permissions=["replay"]
    )
    def replay_selected(self, request, queryset):
        self._per_flow(
            request, queryset, dead_letters_replay, lambda run: f"replay run {run.pk} started: {run.message}"
        )

    def _per_flow(self, request, queryset, service, said) -> None:
        """Calls ``service(flow=, ids=)`` once per flow of the selected dead letters and
        says what each call did, or why it was refused."""
        for flow, ids in _ids_by_flow(queryset).items():
            try:
                outcome = service(flow=flow, ids=ids)
            except (ConfigError, FlowStateError) as exc:
                self.message_user(request, f"{flow.name}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{flow.name}: {said(outcome)}", messages.SUCCESS)


def _ids_by_flow(queryset) -> dict[DataFlow, list[int]]:
    flows: dict[int, DataFlow] = {}
    ids: dict[int, list[int]] = {}
    for letter in queryset.select_related("flow").order_by("flow_id", "id"):
        flows[letter.flow_id] = letter.flow
        ids.setdefault(letter.flow_id, []).append(letter.pk)
    return {flows[flow_id]: letter_ids for flow_id, letter_ids in ids.items()}


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


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    """Each call of a flow's webhook about a run's end, with its retries."""

    list_display = ["id", "flow", "run", "event", "status", "attempts", "response_status", "created_at"]
    list_filter = ["status", "event"]
    list_select_related = ["flow", "run"]
    exclude = ["url"]  # it may carry a token: shown masked instead
    readonly_fields = [
        "flow",
        "run",
        "event",
        "webhook",
        "status",
        "attempts",
        "response_status",
        "last_error",
    ]

    @admin.display(description="webhook")
    def webhook(self, delivery: WebhookDelivery) -> str:
        return webhook_url_masked(delivery.url)
