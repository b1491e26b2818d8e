"""What a flow is, each run of it, its splits, who read them, and what could not be read."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from dataflow.encryption import SealedJSONField, SealedTextField

if TYPE_CHECKING:
    # Only in django-stubs: at run time Django builds these managers per relation.
    from django.db.models.fields.related_descriptors import RelatedManager

# Under TYPE_CHECKING in each model: the attributes Django adds from the relations (a foreign
# key's ``*_id`` column, the reverse managers named by ``related_name``), which pyright does
# not derive from the fields (django-stubs' way for checkers without its mypy plugin).


class FlowStatus(models.TextChoices):
    IDLE = "idle"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    PAUSED = "paused"


class RunStatus(models.TextChoices):
    READING = "reading"
    TRANSFORMING = "transforming"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"


ACTIVE_RUN_STATUSES = (RunStatus.READING, RunStatus.TRANSFORMING)


class DataFlow(models.Model):
    """A source, a format, a transform and a sink, validated together (see services.flows)."""

    name = models.SlugField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    source_type = models.CharField(max_length=50)
    #: Secrets (the options the source type declares secret) are encrypted at rest, as in
    #: every ``Sealed*`` field (dataflow/encryption.py).
    source_config = SealedJSONField(default=dict, secrets="source")
    format_type = models.CharField(max_length=20)
    format_options = SealedJSONField(default=dict, blank=True, secrets="format")
    transform_sql = models.TextField()
    #: ``[transform]`` keys besides ``sql``: ``trigger_ms``, ``watermark_delay`` (unbounded flows).
    transform_options = models.JSONField(default=dict, blank=True)
    #: ``[stop]``: a rule that ends a run of an unbounded source (``at``, ``after_records``).
    stop_rule = models.JSONField(default=dict, blank=True)
    sink_type = models.CharField(max_length=50)
    sink_config = SealedJSONField(default=dict, secrets="sink")
    parallelism = models.PositiveIntegerField(
        default=4, validators=[MinValueValidator(1), MaxValueValidator(256)]
    )
    batch_size = models.PositiveIntegerField(
        default=10_000, validators=[MinValueValidator(1), MaxValueValidator(10_000_000)]
    )
    poll_interval_ms = models.PositiveIntegerField(
        default=500, validators=[MinValueValidator(10), MaxValueValidator(600_000)]
    )
    skip_errors = models.BooleanField(default=False)
    #: With ``skip_errors``: the run fails as soon as more records than this were bad.
    max_errors = models.PositiveIntegerField(default=1000)
    #: An unbounded flow's readers pause while more records than this are landed but not yet
    #: transformed (Spark is behind), and go on once it has caught up to half of it.
    backpressure_records = models.PositiveIntegerField(default=1_000_000)
    status = models.CharField(max_length=20, choices=FlowStatus.choices, default=FlowStatus.IDLE)
    #: Who may see and steer the flow besides staff (None: staff only, e.g. from a TOML file).
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="dataflows"
    )
    #: ``[schedule]``: a bounded flow's runs on a timetable (``cron`` or ``every``), kept in
    #: django-celery-beat's tables by ``services.schedules``.
    schedule = models.JSONField(default=dict, blank=True)
    #: ``[notify]``: a webhook called when a run ends (``webhook``, ``on``).
    notify = SealedJSONField(default=dict, blank=True, secrets="notify")
    #: ``[flow] freshness``: how long the sink may go without moving ("15 minutes"; "" off).
    freshness = models.CharField(max_length=100, blank=True, default="")
    #: ``freshness`` in seconds (0: off), so the beat's check compares in the database.
    freshness_seconds = models.PositiveIntegerField(default=0)
    #: Set by the freshness check when the flow became stale; None while it is fresh.
    stale_since = models.DateTimeField(null=True, blank=True)
    #: ``[flow] disable_after_failures``: a scheduled flow's schedule is paused after this
    #: many failed runs in a row (0: never).
    disable_after_failures = models.PositiveIntegerField(default=0)
    #: Why the schedule is paused ("" it is not): set by the failure policy, cleared when
    #: the flow is saved again or a run succeeds.
    schedule_paused_message = models.TextField(blank=True, default="")
    #: ``[[expect]]``: checks of each output row (``name``, ``check``, ``on_fail``), see
    #: ``services.expectations``.
    expectations = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    if TYPE_CHECKING:
        owner_id: int | None
        runs: RelatedManager[FlowRun]
        dead_letters: RelatedManager[DeadLetter]
        webhook_deliveries: RelatedManager[WebhookDelivery]

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class FlowRun(models.Model):
    """One execution of a flow: its enumerator state, counters and outcome."""

    flow = models.ForeignKey(DataFlow, on_delete=models.CASCADE, related_name="runs")
    #: The run's identity outside the database (Redis keys, landing directory): random, so
    #: a fresh or restored database never meets the keys of an older run with the same id.
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    #: The OpenLineage run id of the run's current attempt (None: ``uid``). A run that ended
    #: (stopped, or failed) and goes on again is a new OpenLineage run, since a run id's
    #: lifecycle ends at its COMPLETE, FAIL or ABORT: one START per run id.
    lineage_uid = models.UUIDField(null=True, blank=True, editable=False)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.READING)
    #: The flow's settings as they were when the run started, so an edit never mixes runs.
    spec = SealedJSONField(default=dict, secrets="spec")
    schema_ddl = models.TextField(blank=True)
    enumerator_state = models.JSONField(null=True, blank=True)
    splits_pending = models.PositiveIntegerField(default=0)
    enumeration_done = models.BooleanField(default=False)
    #: Totals set when the run ends; while it runs, selectors.runs.run_progress sums the splits
    #: (one counter row updated by every reader would serialize them).
    records_read = models.BigIntegerField(default=0)
    errors_count = models.BigIntegerField(default=0)
    rows_written = models.BigIntegerField(null=True, blank=True)
    #: The fence of the Spark transform: attempt N may publish the sink and end the run only
    #: while this is still N (a later attempt has taken over otherwise).
    transform_attempts = models.PositiveIntegerField(default=0)
    #: Reader tasks that ended with an error (a read-only landing zone, a lost database...).
    reader_failures = models.PositiveIntegerField(default=0)
    message = models.TextField(blank=True)
    #: Expectation name -> ``{"passed", "failed", "on_fail"}`` over what the run published
    #: (a stream: summed over its epochs).
    expectation_counts = models.JSONField(default=dict, blank=True)
    #: The streaming transform's own state (watermarks per split, what was emitted).
    stream_state = models.JSONField(null=True, blank=True)
    #: Set while a user holds the run's readers (``flow_pause``); the run stays active.
    paused_at = models.DateTimeField(null=True, blank=True)
    #: What started the run: a user, the schedule, a restore, a dead-letter replay.
    trigger = models.CharField(max_length=20, default="manual")
    #: The Spark application that ran the transform (its id in the Spark UI and logs).
    spark_app_id = models.CharField(max_length=100, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    transform_started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    if TYPE_CHECKING:
        flow_id: int
        splits: RelatedManager[Split]
        backlog: RelatedManager[PendingSplit]
        epochs: RelatedManager[TransformEpoch]
        checkpoints: RelatedManager[Checkpoint]
        metrics: RelatedManager[MetricSample]
        dead_letters: RelatedManager[DeadLetter]
        webhook_deliveries: RelatedManager[WebhookDelivery]

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["flow"],
                condition=models.Q(status__in=["reading", "transforming"]),
                name="one_active_run_per_flow",
            )
        ]

    def __str__(self) -> str:
        return f"{self.flow.name} run {self.pk}"


class SplitStatus(models.TextChoices):
    ASSIGNED = "assigned"
    UNASSIGNED = "unassigned"  # came back from a reader, waits in the enumerator
    FINISHED = "finished"
    FAILED = "failed"


class Split(models.Model):
    """A split once it has been assigned: its payload and checkpoint (how far it was read)."""

    # No index of its own: unique_split_per_run (run, split_id) serves lookups by run.
    run = models.ForeignKey(FlowRun, on_delete=models.CASCADE, related_name="splits", db_index=False)
    split_id = models.CharField(max_length=1024)
    payload = models.JSONField()
    position = models.BigIntegerField(default=0)
    status = models.CharField(max_length=20, choices=SplitStatus.choices, default=SplitStatus.ASSIGNED)
    owner_subtask = models.IntegerField(null=True, blank=True)
    owner_token = models.CharField(max_length=64, blank=True)
    records_read = models.BigIntegerField(default=0)
    errors_count = models.BigIntegerField(default=0)
    #: Set in the database too: the store inserts splits with raw SQL that lists no counter.
    batches = models.BigIntegerField(default=0, db_default=0)
    bytes_read = models.BigIntegerField(default=0, db_default=0)
    error = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    if TYPE_CHECKING:
        run_id: int
        assignments: RelatedManager[Assignment]
        landed: RelatedManager[LandedBatch]

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["run", "split_id"], name="unique_split_per_run")]
        # One index serves a run's splits by status and a reader's own (status, token):
        # every index is written again each time a split is assigned or finished.
        indexes = [models.Index(fields=["run", "status", "owner_token"], name="split_run_status_owner")]

    def __str__(self) -> str:
        return self.split_id


class PendingSplit(models.Model):
    """A discovered split that waits for a reader: the enumerator's backlog, in ``seq``
    order, kept here so that a tick reads and writes only the splits it hands out."""

    # No index of its own: one_pending_split_per_seq (run, seq) serves it.
    run = models.ForeignKey(FlowRun, on_delete=models.CASCADE, related_name="backlog", db_index=False)
    seq = models.BigIntegerField()
    payload = models.JSONField()

    if TYPE_CHECKING:
        run_id: int

    class Meta:
        ordering = ["seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="one_pending_split_per_seq")]


class AssignmentOutcome(models.TextChoices):
    ACTIVE = "active"
    FINISHED = "finished"
    EXPIRED = "expired"
    REVOKED = "revoked"  # moved to another reader (a rescale, a reader that joined)
    FAILED = "failed"


class Assignment(models.Model):
    """One lease of a split by one reader instance, from assignment to its end."""

    split = models.ForeignKey(Split, on_delete=models.CASCADE, related_name="assignments")
    subtask = models.IntegerField()
    #: Indexed (``assignment_reader_token``): a reader's commit closes its assignments by token.
    reader_token = models.CharField(max_length=64)
    #: host:pid of the process that ran the reader when the split was assigned
    reader_location = models.CharField(max_length=255, blank=True)
    start_position = models.BigIntegerField()
    end_position = models.BigIntegerField(null=True, blank=True)
    outcome = models.CharField(
        max_length=20,
        choices=AssignmentOutcome.choices,
        default=AssignmentOutcome.ACTIVE,
    )
    assigned_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    if TYPE_CHECKING:
        # The foreign key's column; the split's own name is ``split.split_id``.
        split_id: int

    class Meta:
        ordering = ["id"]
        # A plain index: ``db_index`` on a CharField also makes a pattern (LIKE) index on
        # PostgreSQL, which nothing uses and every assignment would write.
        indexes = [models.Index(fields=["reader_token"], name="assignment_reader_token")]


class LandedBatch(models.Model):
    """A Parquet file in the landing zone, committed with the checkpoint that covers it."""

    # No index of its own: one_batch_per_position (split, start_position) serves it.
    split = models.ForeignKey(Split, on_delete=models.CASCADE, related_name="landed", db_index=False)
    start_position = models.BigIntegerField()
    end_position = models.BigIntegerField()
    path = models.CharField(max_length=2048)
    records = models.IntegerField()
    landed_at = models.DateTimeField(auto_now_add=True, null=True)
    #: The streaming transform epoch that took this batch (null: not transformed yet).
    epoch = models.IntegerField(null=True, blank=True)
    #: The latest event time in the batch (ms since the Unix epoch), for watermarks.
    event_time_max_ms = models.BigIntegerField(null=True, blank=True)

    if TYPE_CHECKING:
        split_id: int

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["split", "start_position"], name="one_batch_per_position")
        ]


class EpochStatus(models.TextChoices):
    PLANNED = "planned"
    COMMITTED = "committed"


class TransformEpoch(models.Model):
    """One trigger of the streaming transform of an unbounded run: which landed batches it
    took and which event-time range it emitted, fixed before Spark runs, so a retry after a
    crash writes the same output under the same name."""

    run = models.ForeignKey(FlowRun, on_delete=models.CASCADE, related_name="epochs")
    number = models.PositiveIntegerField()
    #: Event-time bounds (ms) of the windows this epoch emits, for a windowed query.
    window_from_ms = models.BigIntegerField(null=True, blank=True)
    window_to_ms = models.BigIntegerField(null=True, blank=True)
    #: The last epoch of a run whose input ended (a stop rule): every open window is emitted.
    final = models.BooleanField(default=False)
    status = models.CharField(max_length=20, choices=EpochStatus.choices, default=EpochStatus.PLANNED)
    records_in = models.BigIntegerField(default=0)
    rows_written = models.BigIntegerField(null=True, blank=True)
    output = models.CharField(max_length=2048, blank=True)
    #: From the oldest input record's time (its entry time where the source has one, else
    #: when it landed) to this epoch's commit: the end-to-end latency of the epoch.
    latency_ms = models.BigIntegerField(null=True, blank=True)
    #: The epoch's expectation counts (as ``FlowRun.expectation_counts``).
    expectation_counts = models.JSONField(default=dict, blank=True)
    planned_at = models.DateTimeField(auto_now_add=True)
    committed_at = models.DateTimeField(null=True, blank=True)

    if TYPE_CHECKING:
        run_id: int

    class Meta:
        ordering = ["run", "number"]
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="one_epoch_per_number")]


class Checkpoint(models.Model):
    """A consistent point of an unbounded run: every split's committed position and the
    enumerator's state, from which a stopped flow can start again."""

    run = models.ForeignKey(FlowRun, on_delete=models.CASCADE, related_name="checkpoints")
    created_at = models.DateTimeField(auto_now_add=True)
    #: split_id -> {"payload": serialized split, "position": committed position}
    splits = models.JSONField(default=dict)
    enumerator_state = models.JSONField(null=True, blank=True)
    records_read = models.BigIntegerField(default=0)

    if TYPE_CHECKING:
        run_id: int

    class Meta:
        ordering = ["-id"]


class MetricSample(models.Model):
    """Counters of a run (``split_id`` empty) or of one split at one moment, for charts."""

    run = models.ForeignKey(FlowRun, on_delete=models.CASCADE, related_name="metrics")
    split_id = models.CharField(max_length=1024, blank=True)
    at = models.DateTimeField(db_index=True)
    records_read = models.BigIntegerField(default=0)
    bytes_read = models.BigIntegerField(default=0)
    batches = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)
    last_offset = models.CharField(max_length=64, blank=True)
    #: entries not yet read (a stream), where the source can tell
    lag = models.BigIntegerField(null=True, blank=True)
    records_per_s = models.FloatField(default=0)
    #: entry time to sink commit, for the rows of the last epoch (ms)
    latency_ms = models.BigIntegerField(null=True, blank=True)

    if TYPE_CHECKING:
        run_id: int

    class Meta:
        ordering = ["at"]
        # A split's latest sample (its lag on a status page) in one index step: without it
        # each listed split scanned every sample of its run (77 s for a status of 1,000 of
        # 10,000 splits sampled ten times).
        indexes = [models.Index(fields=["run", "split_id", "-at"], name="metricsample_run_split_at")]


class DeadLetter(models.Model):
    """A record that could not be parsed, kept with where it was and why."""

    flow = models.ForeignKey(DataFlow, on_delete=models.CASCADE, related_name="dead_letters")
    run = models.ForeignKey(FlowRun, on_delete=models.CASCADE, related_name="dead_letters")
    split_id = models.CharField(max_length=1024)
    position = models.BigIntegerField()
    #: The position in the source's own words (a stream's entry id, a byte offset).
    offset = models.CharField(max_length=64, blank=True)
    #: 1-based line of the record in its file, where the source has lines.
    line = models.BigIntegerField(null=True, blank=True)
    raw = models.TextField()
    error = models.TextField()
    #: The expectation that dropped this output row ("": a record the format refused).
    expectation = models.CharField(max_length=100, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    if TYPE_CHECKING:
        flow_id: int
        run_id: int

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "split_id", "position"],
                name="one_dead_letter_per_position",
            )
        ]


class SchemaChangeRecord(models.Model):
    """A column that stopped fitting a run's schema (``format.on_schema_change``): one row
    per run, column and kind, with where it was first seen and how many records it touched."""

    run = models.ForeignKey(FlowRun, on_delete=models.CASCADE, related_name="schema_changes")
    column_name = models.CharField(max_length=300)
    #: added, missing or retyped
    kind = models.CharField(max_length=16)
    old_type = models.CharField(max_length=200, blank=True)
    new_type = models.CharField(max_length=200, blank=True)
    #: The policy applied: fail, evolve, rescue or ignore.
    policy = models.CharField(max_length=16)
    #: Where it was first seen, in the source's words (file and line, a stream entry id).
    first_position = models.CharField(max_length=1200, blank=True)
    records = models.BigIntegerField(default=0)
    seen_at = models.DateTimeField(auto_now_add=True)

    if TYPE_CHECKING:
        run_id: int

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "column_name", "kind"], name="one_schema_change_per_column"
            )
        ]


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"  # every retry failed


class WebhookDelivery(models.Model):
    """One call of a flow's webhook about one run's outcome, with its retries."""

    flow = models.ForeignKey(DataFlow, on_delete=models.CASCADE, related_name="webhook_deliveries")
    #: None for a flow's event that no run caused (``flow.stale`` of a flow never run).
    run = models.ForeignKey(
        FlowRun, null=True, blank=True, on_delete=models.CASCADE, related_name="webhook_deliveries"
    )
    event = models.CharField(max_length=20)
    #: The webhook as it was when the run ended (it may carry a token): encrypted at rest.
    url = SealedTextField()
    status = models.CharField(max_length=20, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    response_status = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    if TYPE_CHECKING:
        flow_id: int
        run_id: int | None

    class Meta:
        verbose_name_plural = "webhook deliveries"
        ordering = ["-id"]
        # A run's outcome is told once; a flow's events (stale, paused) once per change,
        # which the flow's own state guards.
        constraints = [
            models.UniqueConstraint(
                fields=["run", "event"],
                condition=models.Q(event__startswith="run."),
                name="one_delivery_per_run_event",
            )
        ]


class Connection(models.Model):
    """A named way to reach an external system (a Redis server now; NATS, S3, Kafka,
    PostgreSQL later), made by staff and granted to users or groups: a flow names it
    (``connection = "orders-redis"``) instead of giving an address. Its ``url`` and
    ``password`` are secrets: encrypted at rest (``SealedTextField``), write-only in the
    API, masked in the admin (see ``services.connections``)."""

    name = models.SlugField(max_length=100, unique=True)
    #: A connection kind a connector accepts (``source_support.connections.CONNECTION_KINDS``).
    type = models.CharField(max_length=50)
    description = models.TextField(blank=True)
    url = SealedTextField()
    username = models.CharField(max_length=255, blank=True)
    password = SealedTextField(max_length=1024, blank=True)
    #: Globs over the keys (or subjects) a flow may read or write through it; empty: any.
    key_patterns = models.JSONField(default=list, blank=True)
    users = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="dataflow_connections")
    groups = models.ManyToManyField("auth.Group", blank=True, related_name="dataflow_connections")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class SinkPathClaim(models.Model):
    """A sink directory kept as its owner's after the flow that wrote it was deleted with
    its output left in place: no other user's flow may read or write there (the path rules
    of ``services.specs.flow_paths_check``), as while the flow existed. ``owner`` None: the
    operator's. Deleting the claim (admin) gives the path free."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="sink_claims"
    )
    #: The directory after symlinks (``realpath``), as the path rules compare them.
    path = models.CharField(max_length=4096)
    flow_name = models.CharField(max_length=100, help_text="The deleted flow that wrote it.")
    created_at = models.DateTimeField(auto_now_add=True)

    if TYPE_CHECKING:
        owner_id: int | None

    class Meta:
        ordering = ["path"]

    def __str__(self) -> str:
        return self.path


class Deployment(models.Model):
    """This deployment's identity: one row, made by the first ``migrate`` (or at first use),
    that every Celery task it sends carries (``services.deployment``), so that a worker of
    another deployment sharing the broker refuses the task instead of running it.

    Not managed by Django's migrations' model state and so not emptied by ``flush`` (as
    tests do between tests): the identity outlives a database emptied of its flows, as the
    processes of a fleet hold it for their lifetime."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    uid = models.CharField(max_length=32)

    class Meta:
        managed = False
        db_table = "dataflow_deployment"

    def __str__(self) -> str:
        return self.uid


class UserQuota(models.Model):
    """One user's quotas where they differ from ``DATAFLOW_USER_QUOTAS`` (a field left
    empty takes the default); see ``services.quotas``."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="dataflow_quota"
    )
    flows = models.PositiveIntegerField(null=True, blank=True, help_text="flows the user may own")
    schedules = models.PositiveIntegerField(null=True, blank=True, help_text="of them with a [schedule]")
    min_schedule_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="the shortest schedule.every"
    )
    concurrent_runs = models.PositiveIntegerField(null=True, blank=True, help_text="runs active at once")
    splits = models.PositiveIntegerField(
        null=True, blank=True, help_text="splits over the user's active runs"
    )
    #: Read through ``dataflow.limits.user_limit`` (its default a setting of its own).
    max_splits_per_flow = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The most splits one run of this user's flows may have (empty: DATAFLOW_MAX_SPLITS_PER_FLOW).",
    )

    def __str__(self) -> str:
        return f"quotas of {self.user}"
