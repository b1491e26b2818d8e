"""``/metrics`` for Prometheus and ``/healthz`` for load balancers and orchestrators.

``/metrics`` reads every flow's figures from the database in a fixed number of queries,
however many flows there are, plus one Redis round trip per active run (its live readers).
The slots of the postgres cdc flows add one query, and one per such flow and per server
their slots are on, each kept ``DATAFLOW_POSTGRES_SLOT_CACHE_SECONDS`` (``dataflow.services.slots``).
It names every tenant's flows, so it wants ``DATAFLOW_METRICS_TOKEN`` as a bearer token or
a staff session; ``DATAFLOW_METRICS_PUBLIC`` opens it to anyone, on purpose only.

``/healthz`` answers whether this process reaches its database and Redis, each within
``HEALTH_TIMEOUT_S``; a failure is named with its cause, never with a stack trace or a password.
It also says whether celery beat ticks ("degraded" when it does not, still a 200: this
process serves, but the fleet's ticks and schedules wait).
"""

from __future__ import annotations

import hmac
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from urllib.parse import urlsplit

import redis
from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.db import Error as DatabaseError
from django.db import connection
from django.db.models import (
    Case,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    Subquery,
    Sum,
    When,
)
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily

from dataflow.models import (
    ACTIVE_RUN_STATUSES,
    DataFlow,
    FlowRun,
    FlowStatus,
    MetricSample,
    RunStatus,
    Split,
    SplitStatus,
)
from dataflow.redis_client import redis_url
from dataflow.services.beat import beat_health
from dataflow.services.context import coordinator_for
from dataflow.services.slots import cdc_flows, slots_report

log = logging.getLogger(__name__)

ENDED_RUN_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.STOPPED)
#: Split states of the latest run: the stored ones, and "pending" (discovered, not yet assigned).
SPLIT_STATES = (*SplitStatus.values, "pending")


# What a scrape reads.


@dataclass
class FlowFigures:
    """One flow's figures as a scrape reports them. Counters are summed over the splits of
    all the flow's runs; ``splits`` are those of its latest run; ``last_run_*`` describe its
    latest ended run (None: no run has ended); ``lag`` and ``live_readers`` its active run."""

    name: str
    status: str
    records_read: int = 0
    bytes_read: int = 0
    batches: int = 0
    errors: int = 0
    splits: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SPLIT_STATES, 0))
    runs_ended: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ENDED_RUN_STATUSES, 0))
    runs_timed: int = 0
    run_seconds_total: float = 0.0
    last_run_seconds: float | None = None
    last_run_rows_written: int | None = None
    lag: int | None = None
    live_readers: int = 0
    #: ``[flow] freshness``: whether the flow is stale; None when it has no freshness.
    stale: bool | None = None
    #: The latest run's expectation counts: name -> {"passed", "failed", "on_fail"}.
    expectations: dict[str, dict] = field(default_factory=dict)


def flow_figures() -> list[FlowFigures]:
    """Every flow's figures, read in five queries whatever the number of flows, and one
    Redis round trip per active run. Without Redis, live readers read 0 (and it is logged)."""
    flows = _flows_with_run_ids()
    figures = {
        flow["id"]: FlowFigures(
            name=flow["name"],
            status=flow["status"],
            stale=(flow["stale_since"] is not None) if flow["freshness_seconds"] else None,
        )
        for flow in flows
    }
    runs = FlowRun.objects.annotate(newest_lag=_newest_lag()).in_bulk(
        [run_id for flow in flows for run_id in (flow["latest_run_id"], flow["last_ended_run_id"]) if run_id]
    )
    # .get: a run that cleanup deleted since the first query is left out, not a failed scrape.
    latest = {flow["id"]: runs.get(flow["latest_run_id"]) for flow in flows}
    latest = {flow_id: run for flow_id, run in latest.items() if run is not None}
    _add_split_totals(figures)
    _add_run_totals(figures)
    _add_latest_splits(figures, latest)
    for flow_id, run in latest.items():
        figures[flow_id].expectations = run.expectation_counts or {}
    for flow in flows:
        _add_last_run(figures[flow["id"]], runs.get(flow["last_ended_run_id"]))
    active = {flow_id: run for flow_id, run in latest.items() if run.status in ACTIVE_RUN_STATUSES}
    for flow_id, run in active.items():
        # Annotated by the query above; the checker knows only FlowRun's own fields.
        figures[flow_id].lag = run.newest_lag  # pyright: ignore[reportAttributeAccessIssue]
    _add_live_readers(figures, active, {flow["id"]: flow["parallelism"] for flow in flows})
    return list(figures.values())


def _flows_with_run_ids() -> list[dict]:
    """Every flow's name, status and parallelism, with the ids of its latest run and of its
    latest ended run (None where it has none)."""
    runs = FlowRun.objects.filter(flow=OuterRef("pk")).order_by("-id").values("id")
    ended = runs.filter(status__in=ENDED_RUN_STATUSES, finished_at__isnull=False)
    return list(
        DataFlow.objects.annotate(
            latest_run_id=Subquery(runs[:1]), last_ended_run_id=Subquery(ended[:1])
        ).values(
            "id",
            "name",
            "status",
            "parallelism",
            "latest_run_id",
            "last_ended_run_id",
            "freshness_seconds",
            "stale_since",
        )
    )


def _add_last_run(flow: FlowFigures, run: FlowRun | None) -> None:
    if run is not None:
        flow.last_run_seconds = (run.finished_at - run.started_at).total_seconds()
        flow.last_run_rows_written = run.rows_written


def _add_split_totals(figures: dict[int, FlowFigures]) -> None:
    """The counters: sums over every split of every run, one row per flow."""
    totals = (
        Split.objects.values("run__flow_id")
        .annotate(
            records=Sum("records_read"),
            bytes=Sum("bytes_read"),
            batches=Sum("batches"),
            errors=Sum("errors_count"),
        )
        .order_by()
    )
    for row in totals:
        flow = figures.get(row["run__flow_id"])
        if flow is None:  # created since the scrape's first query
            continue
        flow.records_read, flow.bytes_read = row["records"], row["bytes"]
        flow.batches, flow.errors = row["batches"], row["errors"]


def _add_run_totals(figures: dict[int, FlowFigures]) -> None:
    """Ended runs by how they ended, and the time they took, one row per (flow, status)."""
    took = ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())
    timed = Q(finished_at__isnull=False)
    rows = (
        FlowRun.objects.filter(status__in=ENDED_RUN_STATUSES)
        .values("flow_id", "status")
        .annotate(runs=Count("id"), timed=Count("id", filter=timed), took=Sum(took, filter=timed))
        .order_by()
    )
    for row in rows:
        flow = figures.get(row["flow_id"])
        if flow is None:  # created since the scrape's first query
            continue
        flow.runs_ended[row["status"]] = row["runs"]
        flow.runs_timed += row["timed"]
        flow.run_seconds_total += row["took"].total_seconds() if row["took"] is not None else 0.0


def _add_latest_splits(figures: dict[int, FlowFigures], latest: dict[int, FlowRun]) -> None:
    """The latest run's splits by state: counted ones, and those still in its backlog."""
    flow_of_run = {run.pk: flow_id for flow_id, run in latest.items()}
    counts = (
        Split.objects.filter(run_id__in=flow_of_run)
        .values("run_id", "status")
        .annotate(splits=Count("id"))
        .order_by()
    )
    for row in counts:
        figures[flow_of_run[row["run_id"]]].splits[row["status"]] = row["splits"]
    for flow_id, run in latest.items():
        figures[flow_id].splits["pending"] = run.splits_pending


def _newest_lag() -> Case:
    """An active run's lag from its newest whole-run sample that knows it (the samples of
    runs that ended are not read)."""
    newest = (
        MetricSample.objects.filter(run=OuterRef("pk"), split_id="", lag__isnull=False)
        .order_by("-at")
        .values("lag")[:1]
    )
    return Case(When(status__in=ACTIVE_RUN_STATUSES, then=Subquery(newest)))


def _add_live_readers(
    figures: dict[int, FlowFigures], active: dict[int, FlowRun], parallelism: dict[int, int]
) -> None:
    """Readers registered in Redis for each active run (their leases have not expired)."""
    for flow_id, run in active.items():
        subtasks = run.spec.get("parallelism", parallelism[flow_id])
        try:
            figures[flow_id].live_readers = len(coordinator_for(run).live_readers(subtasks))
        except redis.RedisError as exc:
            # One unreachable Redis must not cost a timeout per flow, nor the whole scrape.
            log.warning("metrics: live readers not counted, Redis did not answer: %s", exc)
            return


# The Prometheus side.


@dataclass(frozen=True)
class _Families:
    """The metric families a scrape reports (each its own kind: a summary's add_metric
    takes a count and a sum)."""

    records: CounterMetricFamily
    bytes: CounterMetricFamily
    batches: CounterMetricFamily
    errors: CounterMetricFamily
    runs: CounterMetricFamily
    status: GaugeMetricFamily
    splits: GaugeMetricFamily
    lag: GaugeMetricFamily
    readers: GaugeMetricFamily
    last_seconds: GaugeMetricFamily
    last_rows: GaugeMetricFamily
    seconds: SummaryMetricFamily
    stale: GaugeMetricFamily
    expectations: GaugeMetricFamily

    def each(self) -> Iterator[Metric]:
        return (getattr(self, f.name) for f in fields(self))


def _families() -> _Families:
    """The metric families a scrape reports, empty."""
    flow, flow_state, flow_status = ["flow"], ["flow", "state"], ["flow", "status"]
    return _Families(
        records=CounterMetricFamily(
            "dataflow_records_read", "Records read from the source, over all runs of the flow.", labels=flow
        ),
        bytes=CounterMetricFamily(
            "dataflow_read_bytes", "Bytes read from the source, over all runs of the flow.", labels=flow
        ),
        batches=CounterMetricFamily(
            "dataflow_batches", "Record batches landed for Spark, over all runs of the flow.", labels=flow
        ),
        errors=CounterMetricFamily(
            "dataflow_errors", "Records that could not be read, over all runs of the flow.", labels=flow
        ),
        runs=CounterMetricFamily(
            "dataflow_runs", "Runs of the flow that ended, by how they ended.", labels=flow_status
        ),
        status=GaugeMetricFamily(
            "dataflow_flow_status", "1 for the flow's current status, 0 for the others.", labels=flow_status
        ),
        splits=GaugeMetricFamily(
            "dataflow_splits",
            "Splits of the flow's latest run by state (pending: discovered, not yet assigned).",
            labels=flow_state,
        ),
        lag=GaugeMetricFamily(
            "dataflow_lag_records",
            "Entries the active run has not read yet, from its newest sample (where the source can tell).",
            labels=flow,
        ),
        readers=GaugeMetricFamily(
            "dataflow_live_readers", "Readers holding a live lease in the flow's active run.", labels=flow
        ),
        last_seconds=GaugeMetricFamily(
            "dataflow_last_run_duration_seconds",
            "From start to end of the flow's latest ended run.",
            labels=flow,
        ),
        last_rows=GaugeMetricFamily(
            "dataflow_last_run_rows_written",
            "Rows the flow's latest ended run wrote to the sink.",
            labels=flow,
        ),
        seconds=SummaryMetricFamily(
            "dataflow_run_duration_seconds", "Start to end of the flow's ended runs.", labels=flow
        ),
        stale=GaugeMetricFamily(
            "dataflow_flow_stale",
            "1 when the flow's sink has not moved for its [flow] freshness, else 0 (flows with one).",
            labels=flow,
        ),
        expectations=GaugeMetricFamily(
            "dataflow_expectation_rows",
            "Output rows of the flow's latest run that passed or failed each [[expect]] (a stream: so far).",
            labels=["flow", "expectation", "on_fail", "result"],
        ),
    )


class FlowCollector:
    """Reports :func:`flow_figures` as Prometheus metric families, read at each scrape."""

    def describe(self) -> Iterator[Metric]:
        # The names, without reading anything: registering the collector queries nothing.
        return _families().each()

    def collect(self) -> Iterator[Metric]:
        families = _families()
        for figures in flow_figures():
            _report(families, figures)
        return families.each()


def _report(families: _Families, figures: FlowFigures) -> None:
    name = [figures.name]
    families.records.add_metric(name, figures.records_read)
    families.bytes.add_metric(name, figures.bytes_read)
    families.batches.add_metric(name, figures.batches)
    families.errors.add_metric(name, figures.errors)
    families.readers.add_metric(name, figures.live_readers)
    families.seconds.add_metric(name, figures.runs_timed, figures.run_seconds_total)
    for status, runs in figures.runs_ended.items():
        families.runs.add_metric([figures.name, status], runs)
    for status in FlowStatus.values:
        families.status.add_metric([figures.name, status], 1 if figures.status == status else 0)
    for state, splits in figures.splits.items():
        families.splits.add_metric([figures.name, state], splits)
    # Absent rather than 0 when unknown: a 0 would read as "caught up" or "took no time".
    if figures.lag is not None:
        families.lag.add_metric(name, figures.lag)
    if figures.last_run_seconds is not None:
        families.last_seconds.add_metric(name, figures.last_run_seconds)
    if figures.last_run_rows_written is not None:
        families.last_rows.add_metric(name, figures.last_run_rows_written)
    if figures.stale is not None:
        families.stale.add_metric(name, 1 if figures.stale else 0)
    for expectation, counts in figures.expectations.items():
        for result in ("passed", "failed"):
            families.expectations.add_metric(
                [figures.name, expectation, counts.get("on_fail", ""), result], counts.get(result, 0)
            )


class BeatCollector:
    """Seconds since celery beat last ticked, on Redis's clock (+Inf if it never did)."""

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "dataflow_beat_seconds_since_tick",
            "Seconds since celery beat last ticked (+Inf: never); it ticks at least every 5 s.",
        )

    def describe(self) -> Iterator[Metric]:
        return iter([self._family()])

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        try:
            family.add_metric([], beat_health().seconds_since_tick)
        except redis.RedisError as exc:
            log.warning("metrics: beat's last tick not read, Redis did not answer: %s", exc)
        return iter([family])


class SlotCollector:
    """The replication slots the cdc flows own (``dataflow.services.slots``): WAL held back,
    seconds since last confirmed, and whether past ``DATAFLOW_POSTGRES_SLOT_MAX_LAG_MB``;
    slots left behind on those servers; servers not asked (past the limit). One query per
    server, cached a few seconds."""

    def _families(self) -> dict[str, GaugeMetricFamily]:
        labels = ["flow", "slot"]
        return {
            "bytes": GaugeMetricFamily(
                "dataflow_postgres_slot_lag_bytes",
                "WAL bytes the flow's replication slot holds back (pg_current_wal_lsn() - confirmed_flush_lsn).",
                labels=labels,
            ),
            "seconds": GaugeMetricFamily(
                "dataflow_postgres_slot_lag_seconds",
                "Seconds since the flow's slot was last confirmed, as this process saw it (0: nothing held back).",
                labels=labels,
            ),
            "over": GaugeMetricFamily(
                "dataflow_postgres_slot_over_limit",
                "1 when the flow's slot holds back more than DATAFLOW_POSTGRES_SLOT_MAX_LAG_MB, else 0.",
                labels=labels,
            ),
            "left": GaugeMetricFamily(
                "dataflow_postgres_slot_left_behind_bytes",
                "WAL bytes held back by an adf_ slot that no flow owns (drop it: flowctl slots --drop).",
                labels=["server", "slot"],
            ),
            "skipped": GaugeMetricFamily(
                "dataflow_postgres_slot_servers_skipped",
                "Servers whose slots were not read (past DATAFLOW_POSTGRES_SLOT_SERVERS_MAX).",
            ),
        }

    def describe(self) -> Iterator[Metric]:
        return iter(self._families().values())

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        report = slots_report(flows=cdc_flows().select_related("owner"), left_behind=True, capped=True)
        for slot in report.flows:
            if slot.lag_bytes is None:
                continue  # absent rather than 0: the server could not say
            families["bytes"].add_metric([slot.flow, slot.slot], slot.lag_bytes)
            families["seconds"].add_metric([slot.flow, slot.slot], slot.lag_seconds or 0.0)
            families["over"].add_metric([slot.flow, slot.slot], 1 if slot.over_limit else 0)
        for slot in report.left_behind:
            families["left"].add_metric([slot.server, slot.slot], slot.lag_bytes or 0)
        families["skipped"].add_metric([], report.servers_skipped)
        return iter(families.values())


#: The flows' metrics only: not the default registry, whose process metrics each web
#: process would report again under the same names.
REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(FlowCollector())
REGISTRY.register(BeatCollector())
REGISTRY.register(SlotCollector())


def _authorized(request: HttpRequest) -> bool:
    """Whether ``request`` may read every tenant's figures: the metrics token as a bearer
    token, a staff session, or a deployment that declared them public."""
    if settings.DATAFLOW_METRICS_PUBLIC:
        return True
    token = settings.DATAFLOW_METRICS_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if token and scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
        return True
    user = request.user  # an AbstractUser (auth.User), or anonymous: never active
    return isinstance(user, AbstractUser) and user.is_active and user.is_staff


@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    """The flows' metrics in Prometheus' text format; 401 without the token or a staff
    session (403 for a session that is not staff), unless DATAFLOW_METRICS_PUBLIC is set."""
    if not _authorized(request):
        if request.user.is_authenticated:
            return HttpResponse(
                "staff only, or the bearer token (DATAFLOW_METRICS_TOKEN)\n",
                status=403,
                content_type="text/plain",
            )
        return HttpResponse(
            "a bearer token (DATAFLOW_METRICS_TOKEN) or a staff login is required\n",
            status=401,
            content_type="text/plain",
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


# Health.

#: How long each check may take before it counts as failed (both run at once).
HEALTH_TIMEOUT_S = 2.0


def _check_database() -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    finally:
        connection.close()  # the check's own thread: nothing else would close it


def _health_redis() -> redis.Redis:
    # A client of its own (not get_redis()'s, whose timeout outlasts a reader's wait) that
    # connects afresh, as a restarted process would.
    return redis.Redis.from_url(
        redis_url(), socket_timeout=HEALTH_TIMEOUT_S, socket_connect_timeout=HEALTH_TIMEOUT_S
    )


def _check_redis() -> None:
    client = _health_redis()
    try:
        client.ping()
    finally:
        client.close()


class _Degraded(Exception):
    """A check's finding that leaves the process able to serve (answered 200, "degraded")."""


def _check_beat() -> None:
    client = _health_redis()
    try:
        beat = beat_health(client=client)
    finally:
        client.close()
    if beat.stale:
        raise _Degraded(beat.summary)


#: What this process needs to serve: one failing answers 503.
HEALTH_CHECKS: dict[str, Callable[[], None]] = {"database": _check_database, "redis": _check_redis}
#: What the fleet needs but this process does not: one failing answers 200 "degraded".
DEGRADED_CHECKS: dict[str, Callable[[], None]] = {"beat": _check_beat}


class _Check(threading.Thread):
    """One check in a thread of its own, so a server that does not answer costs the
    caller ``HEALTH_TIMEOUT_S`` at most (the thread ends at its client's own timeout)."""

    def __init__(self, name: str, check: Callable[[], None]) -> None:
        super().__init__(name=f"healthz-{name}", daemon=True)
        self.check = check
        self.outcome = f"no answer within {HEALTH_TIMEOUT_S:g} s"

    def run(self) -> None:
        try:
            self.check()
        except _Degraded as exc:
            self.outcome = str(exc)
        except (DatabaseError, redis.RedisError, OSError, ValueError) as exc:
            self.outcome = _describe(exc)
        else:
            self.outcome = "ok"


def _describe(exc: BaseException) -> str:
    """The error's kind and the first line of its message, with any password taken out."""
    message = (str(exc).strip().splitlines() or [""])[0]
    secrets = [settings.DATABASES["default"].get("PASSWORD"), urlsplit(settings.REDIS_URL).password]
    for secret in filter(None, secrets):
        message = message.replace(secret, "***")
    message = re.sub(r"://[^/@\s]*@", "://***@", message)  # credentials in any URL
    return f"{type(exc).__name__}: {message}"[:300]


@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """200 ``{"status": "ok", "database": "ok", "redis": "ok", "beat": "ok"}``; 503
    ``"unavailable"`` naming what failed (``failed``: the database, Redis) and, in place of
    its "ok", why; 200 ``"degraded"`` naming what the fleet lacks (``degraded``: beat has
    not ticked for ``DATAFLOW_BEAT_STALE_SECONDS``) while this process can serve."""
    checks = {name: _Check(name, check) for name, check in (HEALTH_CHECKS | DEGRADED_CHECKS).items()}
    for check in checks.values():
        check.start()
    deadline = time.monotonic() + HEALTH_TIMEOUT_S  # for all checks together: they run at once
    for check in checks.values():
        check.join(max(0.0, deadline - time.monotonic()))
    outcomes = {name: check.outcome for name, check in checks.items()}
    failed = [name for name in HEALTH_CHECKS if outcomes[name] != "ok"]
    if failed:
        return JsonResponse({"status": "unavailable", "failed": failed, **outcomes}, status=503)
    degraded = [name for name in DEGRADED_CHECKS if outcomes[name] != "ok"]
    if degraded:
        return JsonResponse({"status": "degraded", "degraded": degraded, **outcomes})
    return JsonResponse({"status": "ok", **outcomes})
