"""The flow form: select boxes of the registered source, format and sink types, and for
every type a field per option it declares (``source__files__path``), the ``[flow]``,
``[transform]`` and ``[stop]`` fields, and ``[schedule]``/``[notify]`` where the spec has
them. The form turns into a spec in the TOML shape and is validated by
``flow_spec_validate``; a refusal is shown on the field it names."""

from __future__ import annotations

import re
import zoneinfo
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from dataflow.admin.option_fields import (
    OMIT,
    option_field_name,
    option_form_field,
    option_initial,
    option_value,
)
from dataflow.encryption import secrets_check
from dataflow.models import DataFlow
from dataflow.services.notify import DEFAULT_ON, NOTIFY_OUTCOMES, notify_masked, notify_unmasked
from dataflow.services.schedules import CRON_HELP, MIN_EVERY_SECONDS, SCHEDULE_FIELDS
from dataflow.services.specs import (
    FLOW_FIELDS,
    HEALTH_FIELDS,
    TRANSFORM_FIELDS,
    flow_spec_of,
    flow_spec_validate,
)
from dataflow.services.toml_export import spec_toml
from dataflow.services.toml_import import flow_spec_from_toml
from source_support.errors import ConfigError
from source_support.formats import FORMATS
from source_support.registry import SINKS, SOURCES, mask_section, section_options, unmask_section

TYPE_SECTIONS = ("source", "format", "sink")
DEFAULT_TYPES = {"source": "files", "format": "csv", "sink": "parquet"}
SECTION_TITLES = {"source": "Source", "format": "Format", "sink": "Sink"}

FLOW_HELP = {
    "name": "Lowercase letters, digits, - and _ (at most 100). It names the flow in TOML files, "
    "commands and the API, and cannot be changed once the flow exists.",
    "description": "What the flow is for.",
    "parallelism": "How many readers read the source at once.",
    "batch_size": "How many records a reader reads before it lands them as one file.",
    "poll_interval_ms": "How long, in milliseconds, a reader waits before it asks a source that "
    "had nothing new again.",
    "skip_errors": "Whether a record that cannot be parsed goes to the dead letters (checked) "
    "or stops its split (unchecked).",
    "max_errors": "With skip errors: the run fails once more records than this were bad.",
    "backpressure_records": "An unbounded flow's readers pause while more records than this are "
    "landed but not yet transformed.",
    "freshness": "How long the sink may go without moving (e.g. '15 minutes') before the flow is "
    "marked stale and the webhook told; empty: never.",
    "disable_after_failures": "A scheduled flow's schedule is paused after this many failed runs "
    "in a row; 0: never.",
}
TRANSFORM_HELP = {
    "trigger_ms": "Unbounded flows: how often, in milliseconds, what landed is transformed.",
    "watermark_delay": "Unbounded flows with event-time windows: how late a record may come and "
    "still count in its window, such as 10 seconds.",
    "timeout": "How long the Spark job of a run (of each epoch of a stream) may run before it is "
    "cancelled and the run fails, such as 1 hour; at most DATAFLOW_TRANSFORM_TIMEOUT_MAX_SECONDS.",
    "max_output_rows": "The most rows a run (each epoch of a stream) may write; over it, the run "
    "fails and the sink is left as it was. 0: no bound but the site's "
    "(DATAFLOW_TRANSFORM_MAX_OUTPUT_ROWS).",
}
SQL_HELP = (
    "One Spark SQL query over the view <code>source</code>, such as "
    "<code>SELECT * FROM source WHERE temperature &gt; 20</code>. No DDL, no SET, no file reads."
)
STOP_HELP = {
    "at": "Ends a run of an unbounded source (a stream, files with watch): latest (what is there "
    "when the run starts), an ISO-8601 time (2024-05-01T12:00:00Z) or an entry id. Give this or "
    "after records, not both.",
    "after_records": "Ends a run of an unbounded source once this many records were read.",
}
INDEX_RE = re.compile(r"\[\d+\]")


def section_types(section: str) -> list[tuple[str, str]]:
    """The registered types of a section with their descriptions, by name."""
    registry: dict[str, Any] = {"source": SOURCES, "format": FORMATS, "sink": SINKS}[section]
    return [(name, registry[name].description) for name in sorted(registry)]


def _bounds_help(bounds: tuple[int, int] | None, default: Any) -> str:
    notes = []
    if default not in (None, ""):
        notes.append(f"Default: {str(default).lower() if isinstance(default, bool) else default}.")
    if bounds:
        notes.append(f"Between {bounds[0]:,} and {bounds[1]:,}.")
    return " ".join(notes)


def _typed_field(kind: type, default: Any, bounds, help_text: str, *, label: str) -> forms.Field:
    help_text = format_html("{} {}", help_text, _bounds_help(bounds, default))
    common = {"label": label, "help_text": help_text, "required": False}
    if kind is bool:
        return forms.BooleanField(**common)
    if kind is int:
        attrs = {"min": bounds[0], "max": bounds[1]} if bounds else {}
        return forms.IntegerField(widget=forms.NumberInput(attrs=attrs), **common)
    return forms.CharField(widget=forms.TextInput(attrs={"class": "vTextField"}), **common)


def _flow_fields() -> dict[str, forms.Field]:
    fields: dict[str, forms.Field] = {}
    for name, (kind, default, bounds) in FLOW_FIELDS.items():
        label = name.replace("_", " ")
        fields[name] = _typed_field(kind, default, bounds, FLOW_HELP.get(name, ""), label=label)
    fields["name"].widget.attrs.update({"maxlength": 100, "autocomplete": "off"})
    fields["description"].widget = forms.Textarea(attrs={"rows": 2, "class": "vLargeTextField"})
    return fields


def _type_fields() -> dict[str, forms.Field]:
    fields: dict[str, forms.Field] = {}
    for section in TYPE_SECTIONS:
        fields[f"{section}_type"] = forms.ChoiceField(
            label=f"{section} type",
            choices=[(name, name) for name, _ in section_types(section)],
            help_text=f"What the flow's {section} is; its options follow.",
        )
        for type_name, _ in section_types(section):
            for option in section_options(section, type_name):
                fields[option_field_name(section, type_name, option.name)] = option_form_field(option)
    return fields


def _transform_fields() -> dict[str, forms.Field]:
    fields: dict[str, forms.Field] = {
        "transform_sql": forms.CharField(
            label="SQL",
            required=False,
            help_text=mark_safe(SQL_HELP),  # noqa: S308 - a constant of this module
            widget=forms.Textarea(attrs={"rows": 4, "class": "vLargeTextField", "spellcheck": "false"}),
        )
    }
    for name, (kind, default, bounds) in TRANSFORM_FIELDS.items():
        label = name.replace("_", " ")
        fields[f"transform_{name}"] = _typed_field(
            kind, default, bounds, TRANSFORM_HELP.get(name, ""), label=label
        )
    return fields


def _stop_fields() -> dict[str, forms.Field]:
    return {
        "stop_at": forms.CharField(
            label="at",
            required=False,
            help_text=STOP_HELP["at"],
            widget=forms.TextInput(attrs={"class": "vTextField"}),
        ),
        "stop_after_records": forms.IntegerField(
            label="after records",
            required=False,
            min_value=1,
            help_text=STOP_HELP["after_records"],
        ),
    }


def _schedule_fields() -> dict[str, forms.Field]:
    zones = sorted(zoneinfo.available_timezones())
    return {
        "schedule_cron": forms.CharField(
            label="cron",
            required=False,
            help_text=f"When runs start: {CRON_HELP}.",
            widget=forms.TextInput(attrs={"class": "vTextField"}),
        ),
        "schedule_every": forms.CharField(
            label="every",
            required=False,
            help_text=f"Or how often runs start: a duration such as 15 minutes, at least {MIN_EVERY_SECONDS} seconds.",
            widget=forms.TextInput(attrs={"class": "vTextField"}),
        ),
        "schedule_timezone": forms.ChoiceField(
            label="timezone",
            required=False,
            choices=[("", f"--------- ({settings.TIME_ZONE})"), *((z, z) for z in zones)],
            help_text=f"With cron only: the time zone its hours are in. Default: {settings.TIME_ZONE}.",
        ),
    }


def _notify_fields() -> dict[str, forms.Field]:
    return {
        "notify_webhook": forms.CharField(
            label="webhook",
            required=False,
            help_text=mark_safe(
                "An http(s) URL that is sent the run's outcome (a POST of JSON) when a run ends; "
                "its credentials are masked here and kept while left as shown. "
                "Example: <code>https://example.com/hooks/flows</code>."
            ),
            widget=forms.TextInput(attrs={"class": "vTextField", "autocomplete": "off"}),
        ),
        "notify_on": forms.MultipleChoiceField(
            label="on",
            required=False,
            choices=[(o, o) for o in NOTIFY_OUTCOMES],
            widget=forms.CheckboxSelectMultiple,
            help_text="The run outcomes that call the webhook.",
        ),
    }


EXPECT_HELP = (
    "[[expect]] tables, as in a TOML file: name, check (a boolean Spark SQL expression over an "
    'output row), on_fail = "warn" | "drop" (to dead letters) | "fail" (the run, before publishing).'
)


def _expect_fields() -> dict[str, forms.Field]:
    return {
        "expectations": forms.CharField(
            label="Expectations",
            required=False,
            help_text=EXPECT_HELP,
            widget=forms.Textarea(attrs={"rows": 4, "class": "vLargeTextField", "spellcheck": "false"}),
        )
    }


def flow_form_class() -> type[FlowForm]:
    """The flow form for the types registered now (connectors register when the app is
    ready, after the admin is imported, so the form is built on use)."""
    fields = {**_flow_fields(), **_type_fields(), **_transform_fields(), **_expect_fields(), **_stop_fields()}
    fields.update(_schedule_fields())
    fields.update(_notify_fields())
    return type("DataFlowForm", (FlowForm,), fields)


def flow_fieldsets(*, change: bool) -> list[tuple[str | None, dict[str, Any]]]:
    """The admin's layout of ``flow_form_class``: each type's options in a fieldset of
    their own, which a script shows only while the type is chosen (without the script all
    are shown, each saying for which type it counts)."""
    fieldsets: list[tuple[str | None, dict[str, Any]]] = [
        ("Flow", {"fields": ["name", "description"]}),
        ("Reading", {"fields": [n for n in FLOW_FIELDS if n not in ("name", "description", *HEALTH_FIELDS)]}),
        ("Freshness and failures", {"fields": list(HEALTH_FIELDS)}),
        *_type_fieldsets("source"),
        *_type_fieldsets("format"),
        ("Transform", {"fields": ["transform_sql", *(f"transform_{n}" for n in TRANSFORM_FIELDS)]}),
        ("Expectations", {"fields": ["expectations"]}),
        *_type_fieldsets("sink"),
        (
            "Stop rule",
            {"fields": ["stop_at", "stop_after_records"], "description": "Unbounded sources only."},
        ),
    ]
    fieldsets.append(
        (
            "Schedule",
            {
                "fields": ["schedule_cron", "schedule_every", "schedule_timezone"],
                "description": "Bounded flows only: runs on a timetable. Give cron or every, not both.",
            },
        )
    )
    fieldsets.append(("Notify", {"fields": ["notify_webhook", "notify_on"]}))
    if change:
        fieldsets.append(("State", {"fields": ["status", "health", "owner", "created_at", "updated_at"]}))
    return fieldsets


def _type_fieldsets(section: str) -> list[tuple[str, dict[str, Any]]]:
    title = SECTION_TITLES[section]
    fieldsets: list[tuple[str, dict[str, Any]]] = [
        (title, {"fields": [f"{section}_type"], "classes": ["adf-type-choice", f"adf-{section}-choice"]})
    ]
    for type_name, description in section_types(section):
        options = section_options(section, type_name)
        if not options:
            continue
        fieldsets.append(
            (
                f"{title} options: {type_name}",
                {
                    "fields": [option_field_name(section, type_name, o.name) for o in options],
                    "classes": ["adf-options", f"adf-{section}-options", f"adf-type-{type_name}"],
                    "description": format_html(
                        "{} <em>Used when the {} type is {}.</em>", description, section, type_name
                    ),
                },
            )
        )
    return fieldsets


class FlowForm(forms.ModelForm):
    """Validates with ``flow_spec_validate``, so the admin refuses what a TOML file would;
    ``spec`` is then the flow's spec, for ``flow_apply``."""

    class Meta:
        model = DataFlow
        fields: list[str] = []

    #: Who owns the flow the form creates (the admin sets the request's user): a spec is
    #: validated against its owner's connections (``services.connections``).
    new_flow_owner: AbstractBaseUser | AnonymousUser | None = None

    def __init__(self, *args, instance: DataFlow | None = None, initial: dict | None = None, **kwargs):
        stored = flow_initial(instance) if instance is not None and instance.pk else default_initial()
        super().__init__(*args, instance=instance, initial={**stored, **(initial or {})}, **kwargs)
        if self.instance.pk:
            self.fields["name"].disabled = True  # a flow is found by its name: renaming would fork it
        self.spec: dict[str, Any] = {}

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data  # what ModelForm.clean returns
        self._drop_errors_of_unchosen_types(cleaned)
        if self.errors:
            return cleaned
        self.spec = self.flow_spec(cleaned)
        try:
            owner = self.instance.owner if self.instance.pk else self.new_flow_owner
            # A stored secret kept (left masked) that no key decrypts: said as such.
            secrets_check(self.spec, what=f"flow {cleaned.get('name')!r}")
            flow_spec_validate(self.spec, owner=owner)
        except ConfigError as exc:
            target = self.field_of_error(exc.field, cleaned)
            self.add_error(target if target in self.fields else None, str(exc))
        return cleaned

    def clean_expectations(self) -> list[dict[str, Any]]:
        """The ``[[expect]]`` tables of the field's TOML text (checked with the spec)."""
        text = self.cleaned_data.get("expectations") or ""
        try:
            doc = flow_spec_from_toml(text)
        except ConfigError as exc:
            raise forms.ValidationError(exc.reason) from None
        extra = sorted(set(doc) - {"expect"})
        if extra:
            raise forms.ValidationError(f"[{extra[0]}]: only [[expect]] tables belong here")
        expect = doc.get("expect", [])
        if not isinstance(expect, list):
            raise forms.ValidationError("write each expectation as an [[expect]] table")
        return expect

    def _drop_errors_of_unchosen_types(self, cleaned: dict[str, Any]) -> None:
        # Only the chosen type's options count; a stray value in another type's (hidden)
        # field must not block the form with an error the user cannot see.
        for name in list(self.errors):
            section, sep, rest = name.partition("__")
            if sep and section in TYPE_SECTIONS and rest.split("__")[0] != cleaned.get(f"{section}_type"):
                del self.errors[name]

    def flow_spec(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        """The spec the cleaned form describes, in the TOML shape."""
        spec: dict[str, Any] = {"flow": _present({n: cleaned.get(n) for n in FLOW_FIELDS})}
        for section in TYPE_SECTIONS:
            spec[section] = self._section_table(section, cleaned)
        transform = {"sql": cleaned.get("transform_sql") or ""}
        for name, (_, default, _) in TRANSFORM_FIELDS.items():
            value = cleaned.get(f"transform_{name}")
            if value not in (None, "", default):
                transform[name] = value
        spec["transform"] = transform
        if cleaned.get("expectations"):
            spec["expect"] = cleaned["expectations"]
        stop = _present(
            {"at": (cleaned.get("stop_at") or "").strip(), "after_records": cleaned.get("stop_after_records")}
        )
        if stop:
            spec["stop"] = stop
        schedule = _present({n: (cleaned.get(f"schedule_{n}") or "").strip() for n in SCHEDULE_FIELDS})
        if schedule:
            spec["schedule"] = schedule
        notify = self._notify_table(cleaned)
        if notify:
            spec["notify"] = notify
        return spec

    def _notify_table(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        webhook = (cleaned.get("notify_webhook") or "").strip()
        if not webhook:
            return {}
        table = {"webhook": webhook, "on": list(cleaned.get("notify_on") or [])}
        if self.instance.pk and self.instance.notify:
            table = notify_unmasked(table, self.instance.notify)
        return table

    def section_table_now(self, section: str) -> dict[str, Any]:
        """The ``[section]`` table of the bound form's values as they stand (the rest of the
        form may be unfinished): its chosen type's fields alone are cleaned. ConfigError
        naming the option for a value its field refuses."""
        type_name = self._cleaned_now(f"{section}_type", f"{section}.type")
        cleaned: dict[str, Any] = {f"{section}_type": type_name}
        for option in section_options(section, type_name):
            name = option_field_name(section, type_name, option.name)
            cleaned[name] = self._cleaned_now(name, f"{section}.{option.name}")
        return self._section_table(section, cleaned)

    def _cleaned_now(self, name: str, config_field: str) -> Any:
        try:
            return self.fields[name].clean(self[name].data)
        except forms.ValidationError as exc:
            raise ConfigError(config_field, "; ".join(exc.messages)) from None

    def _section_table(self, section: str, cleaned: dict[str, Any]) -> dict[str, Any]:
        # A required choice, and the spec is made only of a form without errors.
        type_name: str = cleaned[f"{section}_type"]
        table: dict[str, Any] = {"type": type_name}
        for option in section_options(section, type_name):
            value = option_value(option, cleaned.get(option_field_name(section, type_name, option.name)))
            if value is not OMIT:
                table[option.name] = value
        if self.instance.pk:
            # A secret left as the form showed it (masked) is the stored secret again.
            table = unmask_section(section, table, flow_spec_of(self.instance)[section])
        return table

    def field_of_error(self, error_field: str, cleaned: dict[str, Any]) -> str | None:
        """The form field that shows a ConfigError about ``error_field`` (``source.path``,
        ``sink.partition_by[0]``); None for the form as a whole."""
        section, _, rest = INDEX_RE.sub("", error_field).partition(".")
        name = rest.split(".")[0]
        if section in TYPE_SECTIONS:
            if name in ("", "type"):
                return f"{section}_type"
            return option_field_name(section, cleaned.get(f"{section}_type") or "", name)
        if section == "flow":
            return name or None
        if section == "transform":
            return "transform_sql" if name in ("", "sql") else f"transform_{name}"
        if section == "stop":
            return f"stop_{name}" if name else "stop_at"
        if section == "expect":
            return "expectations"
        if section in ("schedule", "notify"):
            return (
                f"{section}_{name}" if name else f"{section}_{'cron' if section == 'schedule' else 'webhook'}"
            )
        return None


def _present(table: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in table.items() if v is not None and v != ""}


def default_initial() -> dict[str, Any]:
    """What a new flow's form shows: every option's default, the usual types."""
    initial: dict[str, Any] = {n: d for n, (_, d, _) in FLOW_FIELDS.items() if d is not None}
    initial.update({f"transform_{n}": d for n, (_, d, _) in TRANSFORM_FIELDS.items()})
    initial["notify_on"] = list(DEFAULT_ON)
    for section in TYPE_SECTIONS:
        initial[f"{section}_type"] = DEFAULT_TYPES[section]
        for type_name, _ in section_types(section):
            for option in section_options(section, type_name):
                if option.has_default:
                    name = option_field_name(section, type_name, option.name)
                    initial[name] = option_initial(option, option.default)
    return initial


def flow_initial(flow: DataFlow) -> dict[str, Any]:
    """What the form shows for a stored flow: its values over the defaults, its secrets
    masked."""
    initial = default_initial()
    spec = flow_spec_of(flow)
    initial.update(spec["flow"])
    for section in TYPE_SECTIONS:
        table = mask_section(section, spec[section])
        type_name = table.pop("type")
        initial[f"{section}_type"] = type_name
        for option in section_options(section, type_name):
            if option.name in table:
                name = option_field_name(section, type_name, option.name)
                initial[name] = option_initial(option, table[option.name])
    transform = dict(spec["transform"])
    initial["transform_sql"] = transform.pop("sql")
    initial.update({f"transform_{n}": v for n, v in transform.items()})
    initial["expectations"] = spec_toml({"expect": spec.get("expect", [])})
    initial.update({f"stop_{n}": v for n, v in spec.get("stop", {}).items()})
    initial.update({f"schedule_{n}": v for n, v in spec.get("schedule", {}).items()})
    notify = notify_masked(spec.get("notify", {}))
    initial.update({f"notify_{n}": v for n, v in notify.items()})
    return initial


class TomlImportForm(forms.Form):
    """A flow's TOML, pasted or uploaded."""

    toml = forms.CharField(
        label="TOML",
        required=False,
        widget=forms.Textarea(attrs={"rows": 16, "class": "vLargeTextField", "spellcheck": "false"}),
        help_text="A flow spec: [flow], [source], [format], [transform], [sink] (and [stop]), "
        "as manage.py applyflows takes it.",
    )
    file = forms.FileField(label="or a file", required=False, help_text="A .toml file, one flow.")

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data  # what Form.clean returns
        if not cleaned.get("toml", "").strip() and not cleaned.get("file"):
            raise forms.ValidationError("Paste a flow's TOML or choose a file.")
        return cleaned
