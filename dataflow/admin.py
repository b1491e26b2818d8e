"""The admin: flows are edited through the same validation as TOML files, and started and
stopped through the same service functions as the commands."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages

from dataflow.models import Assignment, DataFlow, DeadLetter, FlowRun, Split
from dataflow.services.flows import FlowStateError, flow_apply, flow_delete, flow_start, flow_stop
from dataflow.services.specs import flow_spec_of, flow_spec_validate
from source_support.errors import ConfigError

FORM_FIELD_OF_ERROR = {
    "source.type": "source_type",
    "format.type": "format_type",
    "sink.type": "sink_type",
    "transform.sql": "transform_sql",
}
FORM_FIELD_OF_SECTION = {"source": "source_config", "format": "format_options", "sink": "sink_config"}


def _form_field(error_field: str) -> str | None:
    """The form field that shows a ConfigError about ``error_field`` (``source.path``)."""
    if error_field in FORM_FIELD_OF_ERROR:
        return FORM_FIELD_OF_ERROR[error_field]
    section, _, name = error_field.partition(".")
    return name if section == "flow" else FORM_FIELD_OF_SECTION.get(section)


class DataFlowForm(forms.ModelForm):
    """Validates with ``flow_spec_validate``, so the admin refuses what a TOML file would."""

    class Meta:
        model = DataFlow
        exclude = ["status"]

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        names = {f.name for f in DataFlow._meta.fields}
        self.spec = flow_spec_of(DataFlow(**{k: v for k, v in cleaned.items() if k in names}))
        try:
            flow_spec_validate(self.spec)
        except ConfigError as exc:
            target = _form_field(exc.field)
            self.add_error(target if target in self.fields else None, str(exc))
        return cleaned


RUN_COLUMNS = ["id", "status", "records_read", "errors_count", "rows_written", "started_at", "finished_at"]


class RunInline(admin.TabularInline):
    model = FlowRun
    fields = [*RUN_COLUMNS, "message"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True
    max_num = 0


@admin.register(DataFlow)
class DataFlowAdmin(admin.ModelAdmin):
    form = DataFlowForm
    list_display = ["name", "status", "source_type", "format_type", "sink_type", "parallelism", "updated_at"]
    list_filter = ["status", "source_type", "sink_type"]
    search_fields = ["name", "description"]
    readonly_fields = ["status", "created_at", "updated_at"]
    inlines = [RunInline]
    actions = ["start_flows", "stop_flows"]

    def save_model(self, request, obj, form, change):
        # The one way in: the same service as TOML files and the API.
        saved, _ = flow_apply(spec=form.spec)
        obj.pk = saved.pk

    def delete_model(self, request, obj):
        # A plain delete would leave a running flow's readers and its beat tick behind.
        flow_delete(flow=obj)

    def delete_queryset(self, request, queryset):
        for flow in queryset:
            flow_delete(flow=flow)

    @admin.action(description="Start the selected flows")
    def start_flows(self, request, queryset):
        for flow in queryset:
            try:
                run = flow_start(flow=flow)
            except (ConfigError, FlowStateError) as exc:
                self.message_user(request, f"{flow.name}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{flow.name}: run {run.pk} started")

    @admin.action(description="Stop the selected flows")
    def stop_flows(self, request, queryset):
        for flow in queryset:
            run = flow_stop(flow=flow)
            outcome = f"run {run.pk} stopped" if run else "not running"
            self.message_user(request, f"{flow.name}: {outcome}")


class SplitInline(admin.TabularInline):
    model = Split
    fields = ["split_id", "status", "position", "records_read", "errors_count", "owner_subtask", "error"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    max_num = 0


@admin.register(FlowRun)
class FlowRunAdmin(admin.ModelAdmin):
    list_display = [RUN_COLUMNS[0], "flow", *RUN_COLUMNS[1:]]
    list_filter = ["status", "flow"]
    readonly_fields = [f.name for f in FlowRun._meta.fields]
    inlines = [SplitInline]

    def has_add_permission(self, request):
        return False


@admin.register(DeadLetter)
class DeadLetterAdmin(admin.ModelAdmin):
    list_display = ["id", "flow", "run", "split_id", "offset", "line", "error", "created_at"]
    list_filter = ["flow"]
    readonly_fields = [f.name for f in DeadLetter._meta.fields]

    def has_add_permission(self, request):
        return False


@admin.register(Assignment)
class AssignmentAdmin(admin.ModelAdmin):
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
    readonly_fields = [f.name for f in Assignment._meta.fields]

    def has_add_permission(self, request):
        return False
