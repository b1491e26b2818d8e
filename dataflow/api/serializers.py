"""What the API reads and writes. The flow body is the TOML spec flattened (``[flow]`` keys at
the top level, each other section an object); the rest are read-only views of what the
selectors return, each declared field by field so the OpenAPI schema says what is sent."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.utils import timezone
from rest_framework import serializers
from rest_framework.reverse import reverse

from dataflow.models import DataFlow, FlowRun, FlowStatus, RunStatus, SplitStatus
from dataflow.selectors.flows import STATUS_SPLITS_PAGE_MAX, STATUS_SPLITS_PAGE_SIZE
from dataflow.selectors.runs import flow_latest_run, run_progress
from dataflow.services.connections import connection_masked
from dataflow.services.expectations import ON_FAIL
from dataflow.services.notify import notify_masked
from dataflow.services.schema_changes import MAX_CHANGES_LISTED, run_schema_changes
from dataflow.services.specs import ARRAY_SECTIONS, FLOW_FIELDS, NAME_RE, SECTIONS, flow_spec_of
from source_support.formats.drift import POLICIES
from source_support.registry import mask_section

#: The sections of a flow besides ``[flow]``, as objects of the body (``[[test]]`` stays in
#: the flow's file: ``flowctl test`` runs it, the API does not store it).
SECTION_NAMES = tuple(s for s in SECTIONS if s not in ("flow", "test"))
#: Sections that are arrays of objects (``[[expect]]``).
ARRAY_SECTION_NAMES = tuple(s for s in ARRAY_SECTIONS if s in SECTION_NAMES)
#: Keys the API writes in a flow's JSON that a client may send back unchanged (ignored).
READ_ONLY_KEYS = (
    "status",
    "owner",
    "created_at",
    "updated_at",
    "last_run",
    "url",
    "stale",
    "stale_since",
    "schedule_paused",
)
SECTION_HELP = (
    "The [{}] table of the TOML file, as an object; its fields per type are listed, with "
    "their JSON Schemas, by GET /api/connectors/."
)


def _section(name: str, *, required: bool) -> serializers.DictField:
    return serializers.DictField(
        required=required, allow_null=not required, help_text=SECTION_HELP.format(name)
    )


class ValuesSerializer(serializers.Serializer):
    """Read-only: ``values(instance)`` gives the data as a dict, and each declared field
    renders its entry (None as null). The fields are there for the schema and the
    rendering of dates; nothing is read from a model behind the serializer's back."""

    def values(self, instance) -> dict[str, Any]:
        return instance

    def to_representation(self, instance):
        values = self.values(instance)
        return {
            name: None if values.get(name) is None else field.to_representation(values[name])
            for name, field in self.fields.items()
        }


class LastRunSerializer(ValuesSerializer):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=RunStatus.choices)
    records_read = serializers.IntegerField()
    rows_written = serializers.IntegerField(allow_null=True)
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)

    def values(self, run: FlowRun) -> dict[str, Any]:
        # items(): the stubs type iterating the fields as giving Fields (it gives their names)
        values = {name: getattr(run, name) for name, _ in self.fields.items()}
        if run.status in (RunStatus.READING, RunStatus.TRANSFORMING):
            progress = run_progress(run_id=run.pk)  # totals are set on the run when it ends
            values["records_read"], values["rows_written"] = progress.records_read, progress.rows_written
        return values


class ExpectationSerializer(serializers.Serializer):
    """One ``[[expect]]`` table: a check of each output row and what a failing row does."""

    name = serializers.CharField(max_length=100)
    check = serializers.CharField(
        help_text="A boolean Spark SQL expression over one row of the transform's output (same policy)."
    )
    on_fail = serializers.ChoiceField(
        choices=ON_FAIL,
        required=False,
        help_text="warn: counted; drop: the row goes to dead letters; fail: the run fails, nothing published.",
    )


class ExpectationCountSerializer(ValuesSerializer):
    name = serializers.CharField()
    on_fail = serializers.ChoiceField(choices=ON_FAIL)
    passed = serializers.IntegerField()
    failed = serializers.IntegerField()


class FlowSerializer(serializers.Serializer):
    """A flow as the TOML file holds it, flattened: the [flow] keys and the sections; with
    its state, owner, times, latest run and URL when read. Secrets are shown masked; one
    sent back masked keeps the stored secret. Validation is the services' (ConfigError,
    keyed by the TOML names); this serializer only checks the shape."""

    name = serializers.RegexField(
        NAME_RE.pattern, max_length=100, help_text="Unique; lowercase letters, digits, '-' or '_'."
    )
    description = serializers.CharField(required=False, allow_blank=True)
    parallelism = serializers.IntegerField(required=False, min_value=1, max_value=256)
    batch_size = serializers.IntegerField(required=False, min_value=1, max_value=10_000_000)
    poll_interval_ms = serializers.IntegerField(required=False, min_value=10, max_value=600_000)
    skip_errors = serializers.BooleanField(required=False)
    max_errors = serializers.IntegerField(required=False, min_value=0, max_value=2**31 - 1)
    backpressure_records = serializers.IntegerField(required=False, min_value=1000, max_value=2**31 - 1)
    freshness = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text="How long the sink may go without moving before the flow is stale ('15 minutes'; '' never).",
    )
    disable_after_failures = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=1000,
        help_text="A scheduled flow's schedule is paused after this many failed runs in a row (0 never).",
    )
    # The serializer's metaclass moves declared fields out of the class into
    # _declared_fields, so this shadows no Field.source (what the checker sees).
    source = _section("source", required=True)  # pyright: ignore[reportAssignmentType]
    format = _section("format", required=False)
    transform = _section("transform", required=True)
    sink = _section("sink", required=True)
    stop = _section("stop", required=False)
    schedule = _section("schedule", required=False)
    notify = _section("notify", required=False)
    expect = ExpectationSerializer(
        many=True,
        required=False,
        allow_null=True,
        help_text="The [[expect]] tables: expectations on the output.",
    )
    status = serializers.ChoiceField(choices=FlowStatus.choices, read_only=True)
    owner = serializers.CharField(read_only=True, allow_null=True, help_text="The owner's username.")
    created_at = serializers.DateTimeField(read_only=True)
    updated_at = serializers.DateTimeField(read_only=True)
    last_run = LastRunSerializer(read_only=True, allow_null=True)
    url = serializers.URLField(read_only=True)
    stale = serializers.BooleanField(
        read_only=True, help_text="Whether the sink has not moved for the flow's freshness."
    )
    stale_since = serializers.DateTimeField(read_only=True, allow_null=True)
    schedule_paused = serializers.CharField(
        read_only=True, help_text="Why the flow's schedule is paused ('' it is not)."
    )

    def to_internal_value(self, data) -> dict[str, Any]:
        """The TOML-shaped spec: ``{"flow": {...}, "<section>": {...}}``; a section given
        as null is kept as None (PATCH: remove it; POST, PUT: leave it out)."""
        if not isinstance(data, dict):
            raise serializers.ValidationError(
                {"non_field_errors": ["a flow is a JSON object: the [flow] keys and the sections as objects"]}
            )
        errors: dict[str, list[str]] = {}
        for key, value in data.items():
            if key in ARRAY_SECTION_NAMES:
                if value is not None and not isinstance(value, list):
                    errors[key] = [f"must be an array of objects (the [[{key}]] tables)"]
            elif key in SECTION_NAMES:
                if value is not None and not isinstance(value, dict):
                    errors[key] = [f"must be an object (the [{key}] table)"]
            elif key not in FLOW_FIELDS and key not in READ_ONLY_KEYS:
                errors[key] = [
                    f"is not a field of a flow ({', '.join(FLOW_FIELDS)}) nor a section ({', '.join(SECTION_NAMES)})"
                ]
        expected = self.context.get("name")
        if expected is not None and "name" in data and data["name"] != expected:
            errors["name"] = [f"must be the flow's name, {expected!r}, or left out: a flow cannot be renamed"]
        if errors:
            raise serializers.ValidationError(errors)
        spec: dict[str, Any] = {"flow": {k: v for k, v in data.items() if k in FLOW_FIELDS}}
        for section in SECTION_NAMES:
            if section in data and (data[section] is not None or self.partial):
                spec[section] = data[section]
        return spec

    def to_representation(self, flow: DataFlow) -> dict[str, Any]:
        spec = flow_spec_of(flow)
        out: dict[str, Any] = dict(spec["flow"])
        for section in SECTION_NAMES:
            if section in ARRAY_SECTION_NAMES:
                out[section] = spec.get(section, [])
            elif section in spec:
                out[section] = (notify_masked if section == "notify" else partial(mask_section, section))(
                    spec[section]
                )
        latest_runs = self.context.get("latest_runs")  # a list's, fetched at once
        last_run = latest_runs.get(flow.pk) if latest_runs is not None else flow_latest_run(flow=flow)
        request = self.context.get("request")
        out |= {
            "status": flow.status,
            "owner": flow.owner.username if flow.owner_id else None,
            "created_at": self.fields["created_at"].to_representation(flow.created_at),
            "updated_at": self.fields["updated_at"].to_representation(flow.updated_at),
            # The declared field renders it: a serializer made per flow copied its fields each time.
            "last_run": None if last_run is None else self.fields["last_run"].to_representation(last_run),
            "url": reverse("dataflow:api:flow-detail", kwargs={"name": flow.name}, request=request),
            "freshness": flow.freshness,
            "disable_after_failures": flow.disable_after_failures,
            "stale": flow.stale_since is not None,
            "stale_since": None
            if flow.stale_since is None
            else self.fields["stale_since"].to_representation(flow.stale_since),
            "schedule_paused": flow.schedule_paused_message,
        }
        return out


class FlowReplaceSerializer(FlowSerializer):
    """PUT: the whole spec; ``name`` may be left out (it must equal the URL's if given)."""

    name = serializers.RegexField(NAME_RE.pattern, max_length=100, required=False)


class ValidSerializer(serializers.Serializer):
    valid = serializers.BooleanField()


class ActionSerializer(ValuesSerializer):
    """What an action did: the flow, the run it acted on, and the flow's state now."""

    flow = serializers.CharField()
    run = serializers.IntegerField(allow_null=True, help_text="The id of the run acted on.")
    status = serializers.ChoiceField(choices=FlowStatus.choices, help_text="The flow's state now.")
    run_status = serializers.ChoiceField(choices=RunStatus.choices, allow_null=True)
    run_url = serializers.URLField(allow_null=True)

    def values(self, instance) -> dict[str, Any]:
        flow, run = instance
        flow.refresh_from_db(fields=["status"])
        if run is not None:
            run.refresh_from_db(fields=["status"])
        request = self.context.get("request")
        return {
            "flow": flow.name,
            "run": run.pk if run else None,
            "status": flow.status,
            "run_status": run.status if run else None,
            "run_url": reverse("dataflow:api:run-detail", kwargs={"pk": run.pk}, request=request)
            if run
            else None,
        }


class RestartQuerySerializer(serializers.Serializer):
    only_failed = serializers.BooleanField(
        required=False, default=False, help_text="Restart only the latest run's failed splits."
    )


class SchemaChangeSerializer(serializers.Serializer):
    """A column that stopped fitting the run's schema (``format.on_schema_change``)."""

    column = serializers.CharField()
    kind = serializers.ChoiceField(choices=["added", "missing", "retyped"])
    old_type = serializers.CharField(
        allow_blank=True, help_text="The schema's type (blank for a new column)."
    )
    new_type = serializers.CharField(
        allow_blank=True, help_text="The type it landed as (blank when missing)."
    )
    policy = serializers.ChoiceField(choices=list(POLICIES))
    first_position = serializers.CharField(allow_blank=True, help_text="Where it was first seen.")
    records = serializers.IntegerField(help_text="Records it touched.")


class RunSerializer(ValuesSerializer):
    """A run with its counters (summed over its splits while it runs)."""

    id = serializers.IntegerField()
    flow = serializers.CharField()
    url = serializers.URLField()
    status = serializers.ChoiceField(choices=RunStatus.choices)
    trigger = serializers.CharField(help_text="manual, schedule, restore, replay...")
    paused = serializers.BooleanField()
    records_read = serializers.IntegerField()
    errors_count = serializers.IntegerField()
    rows_written = serializers.IntegerField(allow_null=True)
    splits_total = serializers.IntegerField()
    splits_finished = serializers.IntegerField()
    message = serializers.CharField(allow_blank=True)
    error = serializers.CharField(allow_null=True, help_text="Why the run failed (null unless it failed).")
    spark_app_id = serializers.CharField(allow_blank=True)
    started_at = serializers.DateTimeField()
    transform_started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    duration_seconds = serializers.FloatField(help_text="Until it finished, or until now while it runs.")
    schema_changes = SchemaChangeSerializer(
        many=True, help_text=f"Schema changes seen, one per column and kind (at most {MAX_CHANGES_LISTED})."
    )
    expectations = ExpectationCountSerializer(
        many=True,
        help_text="Rows that passed and failed each expectation (a stream: over its epochs so far).",
    )

    def values(self, run: FlowRun) -> dict[str, Any]:
        progress = run_progress(run_id=run.pk)
        end = run.finished_at or timezone.now()
        request = self.context.get("request")
        return {
            "id": run.pk,
            "flow": run.flow.name,
            "url": reverse("dataflow:api:run-detail", kwargs={"pk": run.pk}, request=request),
            "status": run.status,
            "trigger": run.trigger,
            "paused": run.paused_at is not None,
            "records_read": progress.records_read
            if not progress.done
            else max(run.records_read, progress.records_read),
            "errors_count": progress.errors_count
            if not progress.done
            else max(run.errors_count, progress.errors_count),
            "rows_written": progress.rows_written,
            "splits_total": progress.splits_total,
            "splits_finished": progress.splits_finished,
            "message": progress.message,
            "error": run.message if run.status == RunStatus.FAILED else None,
            "spark_app_id": run.spark_app_id,
            "started_at": run.started_at,
            "transform_started_at": run.transform_started_at,
            "finished_at": run.finished_at,
            "duration_seconds": round(max((end - run.started_at).total_seconds(), 0.0), 3),
            "schema_changes": run_schema_changes(run),
            "expectations": [{"name": name, **c} for name, c in (run.expectation_counts or {}).items()],
        }


class SlotSerializer(ValuesSerializer):
    flow = serializers.CharField()
    owner = serializers.CharField(allow_blank=True)
    slot = serializers.CharField()
    server = serializers.CharField(help_text="host:port of the PostgreSQL server")
    database = serializers.CharField(allow_blank=True)
    found = serializers.BooleanField(help_text="Whether the server lists the slot.")
    active = serializers.BooleanField(help_text="Whether a session reads the slot now.")
    lag_bytes = serializers.IntegerField(
        allow_null=True, help_text="WAL the slot holds back: pg_current_wal_lsn() - confirmed_flush_lsn."
    )
    lag_seconds = serializers.FloatField(
        allow_null=True, help_text="Seconds since the slot was last confirmed (0: it holds nothing back)."
    )
    over_limit = serializers.BooleanField(help_text="Past DATAFLOW_POSTGRES_SLOT_MAX_LAG_MB.")
    error = serializers.CharField(allow_blank=True, help_text="Why the server could not say ('' it did).")


class SlotReportSerializer(ValuesSerializer):
    slots = SlotSerializer(many=True, help_text="The slots your cdc flows own.")
    left_behind = SlotSerializer(
        many=True,
        help_text="Staff only: adf_ slots on those servers that no flow owns (flowctl slots --drop).",
    )
    max_lag_mb = serializers.FloatField(help_text="DATAFLOW_POSTGRES_SLOT_MAX_LAG_MB")


class StatusRunSerializer(ValuesSerializer):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=RunStatus.choices)
    paused = serializers.BooleanField()
    trigger = serializers.CharField()
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    message = serializers.CharField(allow_blank=True)
    splits_total = serializers.IntegerField()
    splits_finished = serializers.IntegerField()
    records_read = serializers.IntegerField()
    errors_count = serializers.IntegerField()
    rows_written = serializers.IntegerField(allow_null=True)
    expectations = ExpectationCountSerializer(
        many=True, help_text="Rows that passed and failed each expectation."
    )
    slot = SlotSerializer(
        allow_null=True, required=False, help_text="A postgres cdc flow's replication slot and its lag."
    )


class ReaderSerializer(ValuesSerializer):
    subtask = serializers.IntegerField()
    location = serializers.CharField(allow_blank=True, help_text="host:pid of the reader's process")


class SplitStateSerializer(ValuesSerializer):
    split_id = serializers.CharField()
    state = serializers.ChoiceField(choices=SplitStatus.choices)
    reader = ReaderSerializer(allow_null=True)
    position = serializers.IntegerField()
    offset = serializers.CharField(help_text="The position in the source's own words.")
    records_read = serializers.IntegerField()
    bytes_read = serializers.IntegerField()
    errors_count = serializers.IntegerField()
    lag = serializers.IntegerField(allow_null=True, help_text="Entries not read yet, where the source tells.")
    error = serializers.CharField(allow_blank=True)


class FlowStatusSerializer(ValuesSerializer):
    flow = serializers.CharField()
    status = serializers.ChoiceField(choices=FlowStatus.choices)
    stale = serializers.BooleanField(help_text="Whether the sink has not moved for the flow's freshness.")
    stale_since = serializers.DateTimeField(allow_null=True)
    schedule_paused = serializers.CharField(
        allow_blank=True, help_text="Why the flow's schedule is paused ('' it is not)."
    )
    run = StatusRunSerializer(allow_null=True, help_text="The latest run, with live counters.")
    splits = SplitStateSerializer(many=True, help_text="One page of the run's splits, by id.")
    splits_listed = serializers.IntegerField(help_text="Splits on this page.")
    splits_by_state = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="How many of the run's splits are in each state (all of them).",
    )
    splits_page = serializers.IntegerField(help_text="The page listed (from 1).")
    splits_pages = serializers.IntegerField(help_text="How many pages the run's splits fill.")
    last_error = serializers.CharField(allow_null=True)


class FlowDeleteQuerySerializer(serializers.Serializer):
    delete_output = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Remove the flow's sink directory too (else it is kept, and stays its owner's).",
    )


class StatusQuerySerializer(serializers.Serializer):
    """Which page of the run's splits a status lists."""

    splits_page = serializers.IntegerField(required=False, min_value=1, max_value=10**9, default=1)
    splits_page_size = serializers.IntegerField(
        required=False, min_value=1, max_value=STATUS_SPLITS_PAGE_MAX, default=STATUS_SPLITS_PAGE_SIZE
    )


class DeadLetterSerializer(ValuesSerializer):
    id = serializers.IntegerField()
    flow = serializers.CharField()
    run = serializers.IntegerField()
    split_id = serializers.CharField()
    position = serializers.IntegerField()
    offset = serializers.CharField(allow_blank=True, help_text="Where the record was, in the source's words.")
    line = serializers.IntegerField(allow_null=True)
    raw = serializers.CharField(allow_blank=True)
    error = serializers.CharField(allow_blank=True)
    expectation = serializers.CharField(
        allow_blank=True, help_text="The expectation that dropped this output row ('': a bad record)."
    )
    created_at = serializers.DateTimeField()
    url = serializers.URLField()

    def values(self, letter) -> dict[str, Any]:
        values = {name: getattr(letter, name, None) for name, _ in self.fields.items()}  # items(): as above
        values["flow"], values["run"] = letter.flow.name, letter.run_id
        values["url"] = reverse(
            "dataflow:api:dead-letter-detail", kwargs={"pk": letter.pk}, request=self.context.get("request")
        )
        return values


class DeadLetterSelectionSerializer(serializers.Serializer):
    """Which dead letters: ``ids``, or all of ``run`` (both: those ids of that run)."""

    ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1), required=False, allow_empty=False, max_length=100_000
    )
    run = serializers.IntegerField(required=False, min_value=1)

    def validate(self, attrs):
        if "ids" not in attrs and "run" not in attrs:
            raise serializers.ValidationError('give "ids" (a list of dead letter ids) or "run" (a run id)')
        return attrs


class DeadLettersDiscardedSerializer(serializers.Serializer):
    discarded = serializers.IntegerField()


class OffsetSerializer(ValuesSerializer):
    split = serializers.CharField()
    position = serializers.IntegerField()
    offset = serializers.CharField(help_text="The position in the source's own words.")
    status = serializers.ChoiceField(choices=SplitStatus.choices)
    records_read = serializers.IntegerField()


class OffsetsSerializer(ValuesSerializer):
    flow = serializers.CharField()
    run = serializers.IntegerField(allow_null=True, help_text="The run whose splits these are (the latest).")
    offsets = OffsetSerializer(many=True)


class OffsetsUpdateSerializer(serializers.Serializer):
    offsets = serializers.DictField(
        child=serializers.CharField(max_length=256),
        allow_empty=False,
        help_text='Split id -> new offset in the source\'s words, e.g. {"orders": "1700000000000-0"}.',
    )


class CheckpointSplitSerializer(ValuesSerializer):
    position = serializers.IntegerField()
    finished = serializers.BooleanField()


class CheckpointSerializer(ValuesSerializer):
    id = serializers.IntegerField()
    run = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    records_read = serializers.IntegerField()
    splits = serializers.DictField(child=CheckpointSplitSerializer(), help_text="Split id -> its position.")

    def values(self, checkpoint) -> dict[str, Any]:
        return {
            "id": checkpoint.pk,
            "run": checkpoint.run_id,
            "created_at": checkpoint.created_at,
            "records_read": checkpoint.records_read,
            "splits": {
                split_id: {"position": entry.get("position", 0), "finished": bool(entry.get("finished"))}
                for split_id, entry in (checkpoint.splits or {}).items()
            },
        }


class RestoreSerializer(serializers.Serializer):
    checkpoint = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, help_text="The checkpoint's id; left out: the newest."
    )


class MetricsQuerySerializer(serializers.Serializer):
    split = serializers.CharField(required=False, allow_blank=True, default="", max_length=1024)
    since = serializers.DateTimeField(required=False, allow_null=True, default=None)
    run = serializers.IntegerField(required=False, allow_null=True, min_value=1, default=None)


class MetricSampleSerializer(ValuesSerializer):
    at = serializers.DateTimeField()
    records_read = serializers.IntegerField()
    bytes_read = serializers.IntegerField()
    batches = serializers.IntegerField()
    # Moved into _declared_fields by the metaclass: Serializer.errors stays the property.
    errors = serializers.IntegerField()  # pyright: ignore[reportAssignmentType]
    records_per_s = serializers.FloatField()
    lag = serializers.IntegerField(allow_null=True)
    latency_ms = serializers.IntegerField(allow_null=True)


class MetricsSerializer(ValuesSerializer):
    flow = serializers.CharField()
    run = serializers.IntegerField(allow_null=True, help_text="The run (the latest by default; null: none).")
    split = serializers.CharField(allow_blank=True, help_text="The split (empty: the whole run).")
    series = MetricSampleSerializer(many=True, help_text="Samples, oldest first.")


class ConnectorSerializer(ValuesSerializer):
    type = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    schema = serializers.DictField(help_text="The JSON Schema of the section's object for this type.")
    unbounded = serializers.JSONField(
        required=False,
        help_text='Sources: true, false, or "config" (as the config says, e.g. files with watch).',
    )
    appends = serializers.BooleanField(
        required=False, help_text="Sinks: whether it can take a stream's output."
    )

    def to_representation(self, instance):
        return {k: v for k, v in super().to_representation(instance).items() if k in instance}


class ConnectorCatalogSerializer(ValuesSerializer):
    sources = ConnectorSerializer(many=True)
    formats = ConnectorSerializer(many=True)
    sinks = ConnectorSerializer(many=True)


class DetailSerializer(serializers.Serializer):
    detail = serializers.CharField()


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField()


class ConnectionSerializer(serializers.Serializer):
    """A connection as the API shows it: its url with credentials masked, its password
    never; the grants (user and group names) only to staff."""

    name = serializers.SlugField()
    type = serializers.CharField()
    description = serializers.CharField()
    url = serializers.CharField(help_text="Masked: credentials shown as ****.")
    username = serializers.CharField()
    has_password = serializers.BooleanField()
    key_patterns = serializers.ListField(child=serializers.CharField())
    users = serializers.ListField(child=serializers.CharField(), help_text="Staff only.")
    groups = serializers.ListField(child=serializers.CharField(), help_text="Staff only.")

    def to_representation(self, connection):
        masked = connection_masked(connection)
        return {
            "name": connection.name,
            "type": connection.type,
            "description": connection.description,
            "url": masked["url"],
            "username": connection.username,
            "has_password": bool(connection.password),
            "key_patterns": list(connection.key_patterns),
            # Who else may use it is staff's business: a user sees only that it is theirs.
            "users": [u.username for u in connection.users.all()] if self.context.get("staff") else [],
            "groups": [g.name for g in connection.groups.all()] if self.context.get("staff") else [],
        }


class ConnectionWriteSerializer(serializers.Serializer):
    """What staff send to create or replace a connection. ``url`` and ``password`` are
    write-only; sent back as shown (masked), they keep the stored secrets, and a
    ``password`` left out keeps the stored one (``""`` clears it)."""

    name = serializers.CharField(max_length=100)
    type = serializers.CharField(max_length=50)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    url = serializers.CharField(max_length=4096, write_only=True)
    username = serializers.CharField(required=False, allow_blank=True, default="", max_length=255)
    password = serializers.CharField(required=False, allow_blank=True, max_length=1024, write_only=True)
    key_patterns = serializers.ListField(
        child=serializers.CharField(max_length=512), required=False, default=list, max_length=100
    )
    users = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    groups = serializers.ListField(child=serializers.CharField(), required=False, default=list)


#: A preview's own keys in a request body, besides the flow's.
PREVIEW_KEYS = ("limit", "timeout_s", "from")


class PreviewOptionsSerializer(serializers.Serializer):
    """How much a preview reads: the service checks the bounds (DATAFLOW_PREVIEW_*)."""

    limit = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text="Records to read (default 100; at most DATAFLOW_PREVIEW_MAX_RECORDS).",
    )
    timeout_s = serializers.FloatField(
        required=False,
        min_value=0.5,
        help_text="Seconds the source may take (default 10; at most DATAFLOW_PREVIEW_MAX_SECONDS).",
    )

    def get_fields(self):
        fields = super().get_fields()
        # "from" is a Python keyword: declared here, under the name the body uses.
        fields["from"] = serializers.ChoiceField(
            choices=["start", "latest"],
            required=False,
            help_text="A stream's first records (start, the default) or its newest (latest).",
        )
        return fields


class FlowPreviewSerializer(FlowSerializer):
    """A flow spec (as POST /flows/ takes it) and the preview's own keys."""

    limit = serializers.IntegerField(required=False, min_value=1, help_text="Records to read (default 100).")
    timeout_s = serializers.FloatField(
        required=False, min_value=0.5, help_text="Seconds the source may take."
    )

    def get_fields(self):
        fields = super().get_fields()
        fields["from"] = serializers.ChoiceField(choices=["start", "latest"], required=False)
        return fields

    def to_internal_value(self, data) -> dict[str, Any]:
        if not isinstance(data, dict):
            return super().to_internal_value(data)
        options = PreviewOptionsSerializer(data={k: data[k] for k in PREVIEW_KEYS if k in data})
        options.is_valid(raise_exception=True)
        spec = super().to_internal_value({k: v for k, v in data.items() if k not in PREVIEW_KEYS})
        return {"spec": spec, **options.validated_data}


class ColumnSerializer(serializers.Serializer):
    name = serializers.CharField()
    type = serializers.CharField(help_text="The Spark SQL type.")


class BadRecordSerializer(serializers.Serializer):
    position = serializers.CharField(help_text="Where the record is, in the source's own words.")
    line = serializers.IntegerField(allow_null=True)
    reason = serializers.CharField()
    raw = serializers.CharField(help_text="The record as read (cut to 1000 characters).")


class PreviewOutputSerializer(serializers.Serializer):
    schema = ColumnSerializer(many=True)
    rows = serializers.ListField(child=serializers.DictField())
    error = serializers.CharField(help_text="Why the transform gave no rows ('' it ran).")


class PreviewSourceSerializer(serializers.Serializer):
    type = serializers.CharField()
    splits = serializers.ListField(child=serializers.CharField())
    truncated = serializers.CharField(help_text="Why reading stopped early ('' it read to the end).")

    def get_fields(self):
        fields = super().get_fields()
        fields["from"] = serializers.CharField()
        return fields


class QueryVerdictSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["stateless", "window", "whole_input"])
    time_column = serializers.CharField()
    window_ms = serializers.IntegerField()
    reason = serializers.CharField()
    needs_stop_rule = serializers.BooleanField()


class PreviewSerializer(serializers.Serializer):
    """A preview: the parsed records and their schema, the bad records, the transform's
    output, and the stream query classifier's verdict."""

    flow = serializers.CharField()
    source = PreviewSourceSerializer()  # pyright: ignore[reportAssignmentType]
    schema = ColumnSerializer(many=True)
    schema_origin = serializers.ChoiceField(choices=["declared", "inferred"])
    records = serializers.ListField(child=serializers.DictField())
    bad_records = BadRecordSerializer(many=True)
    output = PreviewOutputSerializer()
    query = QueryVerdictSerializer()
    limits = serializers.DictField()


class ConnectorTestRequestSerializer(serializers.Serializer):
    """The ``[source]`` or ``[sink]`` options of a connector (``type`` comes from the URL),
    and the test's own keys."""

    section = serializers.ChoiceField(
        choices=["source", "sink"], required=False, help_text="Default: source if the type is a source type."
    )
    format = serializers.DictField(required=False, help_text="A source's [format] (default CSV or fields).")
    timeout_s = serializers.FloatField(required=False, min_value=0.5, help_text="Default 5 s.")


class ConnectionTestRequestSerializer(serializers.Serializer):
    timeout_s = serializers.FloatField(required=False, min_value=0.5, help_text="Default 5 s.")


class ConnectionTestSerializer(serializers.Serializer):
    """What a test of a connection found (``ok``) or what failed (``field``, ``error``)."""

    ok = serializers.BooleanField()
    found = serializers.ListField(child=serializers.CharField(), required=False)
    field = serializers.CharField(required=False)
    error = serializers.CharField(required=False)
    section = serializers.CharField(required=False)
    type = serializers.CharField(required=False)
    connection = serializers.CharField(required=False)
