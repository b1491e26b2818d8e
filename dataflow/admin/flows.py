"""The flow admin: a form built from the connectors' options, steering buttons, TOML import
and export, and a list that shows each flow's last run. Every change goes through the
services in ``dataflow.services``; nothing here decides what a flow may do."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Subquery
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from dataflow.admin.forms import FlowForm, TomlImportForm, flow_fieldsets, flow_form_class
from dataflow.admin.progress import duration_text, number_text, progress_panel
from dataflow.models import Assignment, DataFlow, DeadLetter, FlowRun, Split
from dataflow.selectors.flows import flow_actions, flow_health_lines, flows_with_last_run
from dataflow.selectors.runs import run_duration_s, run_live, run_message, runs_with_live_counters
from dataflow.services.connection_test import SECTIONS, connector_test, credentials_masked, stored_flow_check
from dataflow.services.errors import FlowStateError, TooManyAtOnce
from dataflow.services.flows import (
    flow_apply,
    flow_delete,
    flow_pause,
    flow_restart,
    flow_resume,
    flow_start,
    flow_stop,
)
from dataflow.services.preview import flow_preview
from dataflow.services.specs import flow_spec_of
from dataflow.services.toml_export import flow_toml
from dataflow.services.toml_import import (
    MAX_TOML_CHARS,
    flow_import,
    flow_spec_from_toml,
    flow_spec_from_toml_bytes,
)
from source_support.errors import ConfigError

ADMIN_MEDIA_CSS = {"all": ["dataflow/admin/admin.css"]}
#: Runs the flow's page lists, the latest first.
RUNS_SHOWN = 20

if TYPE_CHECKING:
    # The rows of the lists' querysets, with what they are annotated with.

    class FlowWithLastRun(DataFlow):
        """A flow from ``flows_with_last_run`` (each None while it has no run)."""

        last_run_id: int | None
        last_run_status: str | None
        last_run_records: int | None
        last_run_errors: int | None
        last_run_started_at: datetime | None
        last_run_finished_at: datetime | None

    class RunWithLiveCounters(FlowRun):
        """A run from ``runs_with_live_counters``."""

        live_records: int
        live_errors: int


def _stop(flow: DataFlow) -> tuple[int, str]:
    run = flow_stop(flow=flow)
    if run is None:
        return messages.WARNING, "not running: nothing to stop"
    return messages.SUCCESS, f"run {run.pk} stopped"


def _restart_failed(flow: DataFlow) -> tuple[int, str]:
    run = flow_restart(flow=flow, only_failed=True)
    return messages.SUCCESS, f"run {run.pk}: {run.message}"


#: What each steering button does: the service it calls and the message it leaves.
STEERING: dict[str, Callable[[DataFlow], tuple[int, str]]] = {
    "start": lambda flow: (messages.SUCCESS, f"run {flow_start(flow=flow).pk} started"),
    "stop": _stop,
    "pause": lambda flow: (messages.SUCCESS, f"run {flow_pause(flow=flow).pk} paused"),
    "resume": lambda flow: (messages.SUCCESS, f"run {flow_resume(flow=flow).pk} resumed"),
    "restart": lambda flow: (messages.SUCCESS, f"run {flow_restart(flow=flow).pk} started"),
    "restart_failed": _restart_failed,
}


class RunInline(admin.TabularInline):
    """The flow's runs, with counters that are live while a run reads."""

    model = FlowRun
    fields = (
        "run_link",
        "status",
        "records",
        "errors",
        "rows_written",
        "started_at",
        "finished_at",
        "message_now",
    )
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    verbose_name_plural = f"latest {RUNS_SHOWN} runs"

    def get_queryset(self, request):
        # The latest runs only: a scheduled flow runs thousands of times; the run list
        # (filtered by flow) has them all.
        latest = FlowRun.objects.filter(flow_id=OuterRef("flow_id")).order_by("-id").values("id")[:RUNS_SHOWN]
        return runs_with_live_counters(super().get_queryset(request).filter(pk__in=Subquery(latest)))

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="run")
    def run_link(self, run: FlowRun) -> str:
        return format_html(
            '<a href="{}">run {}</a>', reverse("admin:dataflow_flowrun_change", args=[run.pk]), run.pk
        )

    @admin.display(description="records")
    def records(self, run: RunWithLiveCounters) -> str:
        return number_text(run.live_records)

    @admin.display(description="errors")
    def errors(self, run: RunWithLiveCounters) -> str:
        return number_text(run.live_errors)

    @admin.display(description="message")
    def message_now(self, run: FlowRun) -> str:
        return run_message(run)


@admin.register(DataFlow)
class DataFlowAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "status",
        "health",
        "source_type",
        "sink_type",
        "last_run",
        "last_records",
        "last_errors",
        "last_duration",
        "updated_at",
    ]
    list_filter = ["status", "source_type", "sink_type"]
    search_fields = ["name", "description"]
    readonly_fields = ["status", "health", "owner", "created_at", "updated_at"]
    inlines = [RunInline]
    actions = ["start_flows", "stop_flows", "delete_flows_with_output"]

    class Media:
        js = ["dataflow/admin/flow_form.js", "dataflow/admin/progress.js"]
        css = ADMIN_MEDIA_CSS

    def get_queryset(self, request):
        # The list shows each flow's last run: annotated here, one query per page.
        return flows_with_last_run(super().get_queryset(request))

    def get_fieldsets(self, request, obj=None):
        if obj is not None and not self.has_change_permission(request, obj):
            # Read-only: the option fields would show no values; the spec says it all.
            return [
                ("Flow", {"fields": ["name", "description", "status", "health", "owner", "updated_at"]}),
                ("Spec", {"fields": ["spec_toml"]}),
            ]
        return flow_fieldsets(change=obj is not None)

    def get_readonly_fields(self, request, obj=None):
        return [*self.readonly_fields, "spec_toml"]

    @admin.display(description="health")
    def health(self, flow: DataFlow) -> str:
        """``[flow] freshness`` and ``disable_after_failures`` in words ("ok" when neither bites)."""
        return "; ".join(flow_health_lines(flow=flow)) or "ok"

    @admin.display(description="TOML")
    def spec_toml(self, flow: DataFlow) -> str:
        return format_html('<pre class="adf-json">{}</pre>', flow_toml(flow=flow))

    def get_form(self, request, obj=None, change=False, **kwargs):
        # Built on use: the connectors register after the admin is imported.
        kwargs["form"] = flow_form_class()
        form = super().get_form(request, obj, change=change, **kwargs)
        assert issubclass(form, FlowForm)  # modelform_factory subclasses kwargs["form"]
        form.new_flow_owner = request.user  # a class of this request's own (modelform_factory)
        return form

    def save_model(self, request, obj, form, change):
        # The one way in: the same service as TOML files and the API.
        saved, _ = flow_apply(spec=form.spec, owner=None if change else request.user)
        obj.pk = saved.pk

    def delete_model(self, request, obj):
        # A plain delete would leave a running flow's readers and its beat entries behind.
        flow_delete(flow=obj)

    def delete_queryset(self, request, queryset):
        for flow in queryset:
            flow_delete(flow=flow)

    def get_deleted_objects(self, objs, request):
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        # A flow's runs and what they read go with it (flow_delete); that their own pages
        # delete nothing must not stop the flow from being deleted.
        records = {m._meta.verbose_name for m in (FlowRun, Split, Assignment, DeadLetter)}
        return deleted, counts, perms_needed - records, protected

    # The list's columns: the last run, annotated by flows_with_last_run.

    @admin.display(description="last run", ordering="last_run_id")
    def last_run(self, flow: FlowWithLastRun) -> str:
        if flow.last_run_id is None:
            return "—"
        url = reverse("admin:dataflow_flowrun_change", args=[flow.last_run_id])
        return format_html('<a href="{}">{}</a>', url, flow.last_run_status)

    @admin.display(description="records", ordering="last_run_records")
    def last_records(self, flow: FlowWithLastRun) -> str:
        return number_text(flow.last_run_records)

    @admin.display(description="errors", ordering="last_run_errors")
    def last_errors(self, flow: FlowWithLastRun) -> str:
        return number_text(flow.last_run_errors)

    @admin.display(description="duration")
    def last_duration(self, flow: FlowWithLastRun) -> str:
        if flow.last_run_id is None:
            return "—"
        return duration_text(
            run_duration_s(started_at=flow.last_run_started_at, finished_at=flow.last_run_finished_at)
        )

    # List actions.

    # Steering takes change_dataflow, as the API's start and stop do; a staff user may steer
    # any flow (the API's owner rule: staff see and steer all).
    @admin.action(description="Start the selected flows", permissions=["change"])
    def start_flows(self, request, queryset):
        for flow in queryset:
            self._steer(request, flow, "start")

    @admin.action(description="Stop the selected flows", permissions=["change"])
    def stop_flows(self, request, queryset):
        for flow in queryset:
            self._steer(request, flow, "stop")

    @admin.action(description="Delete the selected flows and their output", permissions=["delete"])
    def delete_flows_with_output(self, request, queryset):
        # The plain delete keeps a flow's sink directory as its owner's; this one removes it.
        for flow in queryset:
            try:
                flow_delete(flow=flow, delete_output=True)
            except ConfigError as exc:
                self.message_user(request, f"{flow.name}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{flow.name}: deleted with its output", messages.SUCCESS)

    def _steer(self, request, flow: DataFlow, action: str) -> None:
        try:
            level, text = STEERING[action](flow)
        except (ConfigError, FlowStateError) as exc:
            self.message_user(request, f"{flow.name}: {exc}", messages.ERROR)
        else:
            self.message_user(request, f"{flow.name}: {text}", level)

    # Pages of their own: steering buttons, import, export.

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("import/", wrap(self.import_view), name="dataflow_dataflow_import"),
            path(
                "<path:object_id>/steer/<str:action>/",
                wrap(require_POST(self.steer_view)),
                name="dataflow_dataflow_steer",
            ),
            path("<path:object_id>/export/", wrap(self.export_view), name="dataflow_dataflow_export"),
            path("<path:object_id>/preview/", wrap(self.preview_view), name="dataflow_dataflow_preview"),
            path("<path:object_id>/check/", wrap(self.check_view), name="dataflow_dataflow_check"),
            # The form's "Test connection" buttons: the add form's, and a stored flow's.
            path(
                "test-connection/<str:section>/",
                wrap(require_POST(self.section_check_view)),
                name="dataflow_dataflow_section_check",
            ),
            path(
                "<path:object_id>/test-connection/<str:section>/",
                wrap(require_POST(self.section_check_view)),
                name="dataflow_dataflow_section_check",
            ),
            *super().get_urls(),
        ]

    def _flow_or_404(self, request, object_id: str) -> DataFlow:
        flow = self.get_object(request, unquote(object_id))
        if flow is None:
            raise Http404(f"no flow with id {object_id!r}")
        return flow

    def steer_view(self, request, object_id: str, action: str):
        """A steering button (POST): calls the service; its refusal is a message, not an error page."""
        flow = self._flow_or_404(request, object_id)
        if not self.has_change_permission(request, flow):
            raise PermissionDenied
        if action not in STEERING:
            raise Http404(f"no action {action!r}")
        self._steer(request, flow, action)
        return redirect("admin:dataflow_dataflow_change", flow.pk)

    def export_view(self, request, object_id: str):
        """The flow as a TOML file, ``<name>.toml``."""
        flow = self._flow_or_404(request, object_id)
        if not self.has_view_permission(request, flow):
            raise PermissionDenied
        response = HttpResponse(flow_toml(flow=flow), content_type="application/toml; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{flow.name}.toml"'
        return response

    def preview_view(self, request, object_id: str):
        """The flow's transform over real records (``flow_preview``): the records, the bad
        records and the output side by side; nothing is written."""
        flow = self._flow_or_404(request, object_id)
        context = self._probe_context(request, flow, f"Preview of {flow.name}")
        try:
            preview = flow_preview(spec=flow_spec_of(flow), owner=flow.owner, user=request.user)
        except (ConfigError, TooManyAtOnce) as exc:
            context["error"] = str(exc)
        else:
            context |= {
                "preview": preview,
                "record_cells": _cells(preview["records"], preview["schema"]),
                "output_cells": _cells(preview["output"]["rows"], preview["output"]["schema"]),
            }
        return TemplateResponse(request, "admin/dataflow/dataflow/preview.html", context)

    def check_view(self, request, object_id: str):
        """What the flow's source and sink reach now (``flow_check``), section by section."""
        flow = self._flow_or_404(request, object_id)
        context = self._probe_context(request, flow, f"Test connection of {flow.name}")
        try:
            context["sections"] = stored_flow_check(flow=flow, user=request.user)
        except (ConfigError, TooManyAtOnce) as exc:
            context["error"] = str(exc)
        return TemplateResponse(request, "admin/dataflow/dataflow/check.html", context)

    def section_check_view(self, request, section: str, object_id: str | None = None):
        """The form's "Test connection" of its ``[source]`` (with its ``[format]``) or
        ``[sink]`` as it stands, unsaved values included: ``connector_test``, as the API's,
        held to the flow owner's rules (the asking user's for a new flow). Answers an HTML
        fragment that the form's script shows beside the section; who may not add (or
        change) the flow is refused with a message (403)."""
        if section not in SECTIONS:
            raise Http404(f"no section {section!r}")
        flow = None if object_id is None else self._flow_or_404(request, object_id)
        template = "admin/dataflow/dataflow/section_check.html"
        context: dict = {"section": section}
        if not (
            self.has_add_permission(request) if flow is None else self.has_change_permission(request, flow)
        ):
            verb = "add flows" if flow is None else f"change flow {flow.name!r}"
            context["error"] = f"Test connection refused: you may not {verb}."
            return TemplateResponse(request, template, context, status=403)
        form = self.get_form(request, flow, change=flow is not None)(request.POST, instance=flow)
        owner = flow.owner if flow is not None else request.user
        try:
            table = form.section_table_now(section)
            context["result"] = connector_test(
                section=section,
                table=table,
                owner=owner,
                user=request.user,
                format_table=form.section_table_now("format") if section == "source" else None,
            )
        except (ConfigError, TooManyAtOnce) as exc:
            # A refusal may quote what was typed (a URL with its password): masked.
            context["error"] = credentials_masked(str(exc))
        return TemplateResponse(request, template, context)

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        context = dict(extra_context or {})
        stored = {} if object_id is None else {"object_id": object_id}
        context["section_check_urls"] = {
            section: reverse("admin:dataflow_dataflow_section_check", kwargs={**stored, "section": section})
            for section in SECTIONS
        }
        return super().changeform_view(request, object_id, form_url, extra_context=context)

    def _probe_context(self, request, flow: DataFlow, title: str) -> dict:
        if not self.has_view_permission(request, flow):
            raise PermissionDenied
        return {**self.admin_site.each_context(request), "opts": self.opts, "title": title, "original": flow}

    def import_view(self, request):
        """Creates or updates a flow from TOML, pasted or uploaded, validated as applyflows does."""
        if not (self.has_add_permission(request) and self.has_change_permission(request)):
            raise PermissionDenied
        form = TomlImportForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            try:
                flow, created = flow_import(spec=_uploaded_spec(form), owner=request.user)
            except ConfigError as exc:
                form.add_error(None, str(exc))
            else:
                verb = "created" if created else "updated"
                self.message_user(request, f"Flow {flow.name} {verb} from TOML.", messages.SUCCESS)
                return redirect("admin:dataflow_dataflow_change", flow.pk)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Import a flow from TOML",
            "form": form,
            "media": self.media + form.media,
        }
        return TemplateResponse(request, "admin/dataflow/dataflow/import.html", context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        flow = self.get_object(request, unquote(object_id))
        context = dict(extra_context or {})
        if flow is not None:
            if self.has_change_permission(request, flow):
                context["flow_actions"] = flow_actions(flow=flow)
            latest = flow.runs.select_related("flow").order_by("-id").first()
            if latest is not None:
                context["progress"] = progress_panel(
                    run_live(run=latest), heading=f"Latest run: run {latest.pk}", link_run=True
                )
        return super().change_view(request, object_id, form_url, extra_context=context)


def _cells(rows: list[dict], columns: list[dict]) -> list[list]:
    """Each row's values in the order of ``columns`` (a preview's table)."""
    return [[row.get(column["name"]) for column in columns] for row in rows]


def _uploaded_spec(form: TomlImportForm) -> dict:
    upload = form.cleaned_data.get("file")
    if upload is None:
        return flow_spec_from_toml(form.cleaned_data["toml"])
    if upload.size > MAX_TOML_CHARS:
        raise ConfigError("toml", f"the file is too large: {upload.size:,} bytes, at most {MAX_TOML_CHARS:,}")
    return flow_spec_from_toml_bytes(upload.read())
