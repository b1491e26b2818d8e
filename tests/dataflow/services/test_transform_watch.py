"""A transform's Spark job is cancelled when its run is stopped, loses its lease or passes
its ``[transform] timeout``; ``[transform] max_output_rows`` keeps an oversized result from
being published.

The runaway query is a CROSS JOIN of the source with itself four times (2,000 rows: 1.6e13
rows to count), which never ends by itself here. "Idle" is what Spark's own status store
says: no active job and no running task in the tests' shared Spark session (the one the
in-process worker runs its transforms on).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection

from connectors.files.object_sink import local_staging
from dataflow.models import EpochStatus, FlowRun, RunStatus, TransformEpoch
from dataflow.redis_client import get_redis
from dataflow.services import transform_watch
from dataflow.services.context import coordinator_for, run_key
from dataflow.services.flows import flow_apply, flow_pause, flow_resume, flow_start, flow_stop
from dataflow.services.specs import transform_limits
from dataflow.services.streams.epochs import StreamState
from dataflow.services.transform_watch import transforms_give_back
from dataflow.spark.session import get_spark, session_started, spark_kill
from source_support.coordination import Mark
from source_support.errors import ConfigError
from tests.connectors.files.s3_sink_support import BUCKET, moto_with_bucket, s3_client, s3_config
from tests.dataflow.services.streams.test_driver import Stream, driver, ids
from tests.factories import DataFlowFactory
from tests.helpers import Beat, read_parquet_rows, run_flow, spec, wait_for_run, wait_until, write_csv

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _quick_kill(settings):
    """Cancelled tasks of the cross join ignore the cancel (one generated loop): the JVM
    that runs them is killed this soon after the cancel. Should a test leave one running
    anyway (it failed before its cancel), the JVM goes after it: the tests after this
    module share the session, and a runaway task would hold a core for the rest of them."""
    settings.DATAFLOW_TRANSFORM_KILL_SECONDS = 3
    yield
    if session_started() and (active_jobs() or running_tasks()):
        spark_kill()


RUNAWAY_SQL = (
    "SELECT a.sensor, count(*) AS n FROM source a CROSS JOIN source b CROSS JOIN source c "
    "CROSS JOIN source d GROUP BY a.sensor"
)


def running_tasks() -> int:
    """Tasks that Spark's executors of this process run now (its status store: a killed
    task counts until its thread has really stopped)."""
    executors = get_spark().sparkContext._jsc.sc().statusStore().executorList(True)
    return sum(executors.apply(i).activeTasks() for i in range(executors.size()))


def active_jobs() -> list[int]:
    return list(get_spark().sparkContext.statusTracker().getActiveJobsIds())


def spark_is_idle() -> bool:
    return not active_jobs() and running_tasks() == 0


def _runaway(dirs, name: str, **transform) -> FlowRun:
    write_csv(dirs.data / "part-0.csv", range(2000))
    flow = DataFlowFactory(
        name=name,
        parallelism=1,
        batch_size=5000,
        transform={"sql": RUNAWAY_SQL, **transform},
        sink_path=str(dirs.out / "sink"),
    )
    return flow_start(flow=flow)


def _wait_until_its_job_runs(run: FlowRun) -> None:
    def running() -> bool:
        run.refresh_from_db()
        assert run.status in (RunStatus.READING, RunStatus.TRANSFORMING), run.message
        return run.status == RunStatus.TRANSFORMING and bool(active_jobs()) and running_tasks() > 0

    wait_until(running, 120, lambda: f"no Spark job of run {run.pk} started: {run.message}")


@pytest.mark.slow
def test_a_stopped_flow_leaves_no_spark_job_of_its_transform_running(worker, dirs):
    with Beat():
        run = _runaway(dirs, "runaway-stop")
        _wait_until_its_job_runs(run)

        flow_stop(flow=run.flow)

        wait_until(spark_is_idle, 30, lambda: f"still running: jobs {active_jobs()}, {running_tasks()} tasks")
    run.refresh_from_db()
    assert run.status == RunStatus.STOPPED
    assert run.message == "stopped by request"
    assert not (dirs.out / "sink").exists()


@pytest.mark.slow
def test_a_transform_past_its_timeout_is_cancelled_and_fails_its_run(worker, dirs):
    with Beat():
        run = _runaway(dirs, "runaway-timeout", timeout="3 seconds")
        run = wait_for_run(run, timeout=180)
        wait_until(spark_is_idle, 30, lambda: f"still running: jobs {active_jobs()}, {running_tasks()} tasks")

    assert run.status == RunStatus.FAILED
    assert run.message == "transform exceeded [transform] timeout of 3 s"
    assert run.transform_attempts == 1, "a timeout is not retried"


@pytest.mark.slow
def test_a_transform_whose_lease_another_process_took_stops_its_job(worker, dirs, settings):
    settings.DATAFLOW_TRANSFORM_LEASE_SECONDS = 3
    with Beat():
        run = _runaway(dirs, "runaway-lease")
        _wait_until_its_job_runs(run)
        # Another process holds the lease now (as after this one's lapsed): the renewer
        # sees it at its next round.
        get_redis().set(coordinator_for(run).keys.mark(Mark.TRANSFORM_LEASE), "another-process", px=600_000)

        wait_until(spark_is_idle, 30, lambda: f"still running: jobs {active_jobs()}, {running_tasks()} tasks")
        run.refresh_from_db()
        assert run.status == RunStatus.TRANSFORMING, "the run itself goes on, with the lease's holder"
        flow_stop(flow=run.flow)


def _explode_spec(dirs, name: str, **transform) -> dict:
    doc = spec(name, str(dirs.data), str(dirs.out / "sink"), parallelism=1)
    # Each input row becomes 100: 10 rows make 1,000.
    doc["transform"] = {"sql": "SELECT id, explode(sequence(1, 100)) AS k FROM source", **transform}
    return doc


@pytest.mark.slow
def test_a_result_over_max_output_rows_is_not_published_and_the_sink_stays(worker, dirs):
    write_csv(dirs.data / "part-0.csv", range(10))
    first = _explode_spec(dirs, "bounded-output")
    first["transform"]["sql"] = "SELECT id FROM source"
    assert run_flow(first).status == RunStatus.SUCCEEDED

    run = run_flow(_explode_spec(dirs, "bounded-output", max_output_rows=999))

    assert run.status == RunStatus.FAILED
    assert run.message == (
        "transform failed: the transform wrote 1,000 rows, more than transform.max_output_rows = 999; "
        "nothing was published and the sink was left as it was"
    )
    assert run.transform_attempts == 1, "an oversized result is not retried"
    assert sorted(read_parquet_rows(dirs.out / "sink")) == [(i,) for i in range(10)]
    assert sorted(p.name for p in dirs.out.iterdir()) == ["sink"], "no staging directory is left"


@pytest.mark.slow
def test_the_sites_ceiling_bounds_a_flow_that_sets_no_max_output_rows(worker, dirs, settings):
    write_csv(dirs.data / "part-0.csv", range(10))
    flow, _ = flow_apply(spec=_explode_spec(dirs, "ceiling"))
    settings.DATAFLOW_TRANSFORM_MAX_OUTPUT_ROWS = 500

    with Beat():
        run = wait_for_run(flow_start(flow=flow), timeout=120)

    assert run.status == RunStatus.FAILED
    assert "wrote 501 rows, more than DATAFLOW_TRANSFORM_MAX_OUTPUT_ROWS = 500" in run.message
    assert not (dirs.out / "sink").exists()


@pytest.mark.slow
def test_a_transform_far_over_its_bound_stops_writing_one_row_past_it(worker, dirs):
    # Issue 25, 2.6: the bound holds while the job writes, not after every row is written.
    write_csv(dirs.data / "part-0.csv", range(10))
    doc = _explode_spec(dirs, "runaway-output", max_output_rows=10)
    doc["transform"]["sql"] = "SELECT id, explode(sequence(1, 1000)) AS k FROM source"  # 10,000 rows

    run = run_flow(doc)

    assert run.status == RunStatus.FAILED
    assert run.message.startswith(
        "transform failed: the transform wrote 11 rows, more than transform.max_output_rows = 10; "
    ), run.message
    assert not (dirs.out / "sink").exists()
    assert sorted(p.name for p in dirs.out.iterdir()) == [], "no staging directory is left"


@pytest.mark.slow
def test_a_transform_whose_staging_outgrows_the_sites_bound_fails_its_run(worker, dirs, settings):
    settings.DATAFLOW_TRANSFORM_MAX_STAGING_BYTES = 100  # less than one Parquet file's footer
    write_csv(dirs.data / "part-0.csv", range(10))

    run = run_flow(_explode_spec(dirs, "staging-full"))

    assert run.status == RunStatus.FAILED
    assert "bytes into its staging directory, more than DATAFLOW_TRANSFORM_MAX_STAGING_BYTES = 100" in (
        run.message
    ), run.message
    assert run.transform_attempts == 1, "a staging over its bound is not retried"
    assert sorted(p.name for p in dirs.out.iterdir()) == [], "nothing published, no staging left"


@pytest.fixture(scope="module")
def moto():
    """A moto server of the module's own (an S3-protocol HTTP endpoint: S3 cannot be reached
    here), with the bucket the S3 sink tests write to."""
    yield from moto_with_bucket()


@pytest.mark.slow
def test_a_transform_whose_staging_outgrows_the_sites_bound_fails_its_run_into_s3_too(
    worker, dirs, settings, moto
):
    # Issue 25, 2.6: only directory sinks were watched; an s3:// sink stages its files locally.
    settings.DATAFLOW_TRANSFORM_MAX_STAGING_BYTES = 100  # less than one Parquet file's footer
    write_csv(dirs.data / "part-0.csv", range(10))
    doc = _explode_spec(dirs, "staging-full-s3")
    doc["sink"] = {"type": "parquet", **s3_config(moto, "flows/staging-full")}

    run = run_flow(doc)

    assert run.status == RunStatus.FAILED
    assert "bytes into its staging directory, more than DATAFLOW_TRANSFORM_MAX_STAGING_BYTES = 100" in (
        run.message
    ), run.message
    assert run.transform_attempts == 1, "a staging over its bound is not retried"
    s3 = s3_client(moto)
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix="flows/staging-full/").get("KeyCount") == 0
    assert "Uploads" not in s3.list_multipart_uploads(Bucket=BUCKET), "nothing left half uploaded"
    assert not local_staging(f"{run_key(run)}-1").exists(), "no local staging left"


@pytest.mark.slow
def test_the_site_bounds_every_transforms_output_by_default():
    from django.conf import settings as site  # noqa: PLC0415 - the shipped values, not a test's

    assert transform_limits({}).max_output_rows == site.DATAFLOW_TRANSFORM_MAX_OUTPUT_ROWS == 100_000_000
    assert transform_limits({}).max_staging_bytes == 20 * 1024**3


@pytest.mark.slow
def test_a_result_within_max_output_rows_is_published(worker, dirs):
    write_csv(dirs.data / "part-0.csv", range(10))

    run = run_flow(_explode_spec(dirs, "within", max_output_rows=1000))

    assert run.status == RunStatus.SUCCEEDED, run.message
    assert run.rows_written == 1000


@pytest.mark.parametrize(
    ("transform", "field", "reason"),
    [
        ({"timeout": "2 days"}, "transform.timeout", "must be between 1 s and 86400 s"),
        ({"timeout": "500 ms"}, "transform.timeout", "must be between 1 s and 86400 s"),
        ({"timeout": "soon"}, "transform.timeout", "is not a duration"),
        ({"max_output_rows": 10_001}, "transform.max_output_rows", "must be at most 10,000"),
        ({"max_output_rows": -1}, "transform.max_output_rows", "must be between 0 and"),
    ],
)
def test_limits_beyond_the_sites_bounds_are_refused_naming_the_field(
    dirs, settings, transform, field, reason
):
    settings.DATAFLOW_TRANSFORM_TIMEOUT_MAX_SECONDS = 86400
    settings.DATAFLOW_TRANSFORM_MAX_OUTPUT_ROWS = 10_000
    doc = spec("refused", str(dirs.data), str(dirs.out / "sink"))
    doc["transform"].update(transform)

    with pytest.raises(ConfigError) as refused:
        flow_apply(spec=doc)

    assert refused.value.field == field
    assert reason in str(refused.value)


# Streams: each epoch's query is watched the same way.

STREAM_RUNAWAY_SQL = (
    "SELECT a.id, a.customer, a.amount, a.ts FROM source a CROSS JOIN source b CROSS JOIN source c "
    "CROSS JOIN source d WHERE a.id + b.id + c.id + d.id < 0"  # on every combination: no shortcut
)
#: About 20 ms a row: an epoch of 600 rows runs for seconds, and then ends by itself.
#: Rows of the slow query's epoch: enough that its job still runs when the test acts on it
#: (each row costs Spark a sum over 2M numbers), few enough that running it again is short.
SLOW_ROWS = 200
STREAM_SLOW_SQL = (
    "SELECT id, customer, amount, ts FROM source "
    "WHERE aggregate(sequence(1, 2000000), 0L, (total, x) -> total + x) > 0"
)


@pytest.mark.slow
def test_a_stream_epoch_past_its_timeout_is_cancelled_and_fails_the_run(dirs):
    stream = Stream(dirs, STREAM_RUNAWAY_SQL, transform={"timeout": "3 seconds"})
    stream.land("s0", [float(i) for i in range(2000)])
    stream.end_input()  # the join's one epoch runs over the whole input once it ended

    assert driver(stream).run_slice(deadline=time.monotonic() + 120) is False

    wait_until(spark_is_idle, 30, lambda: f"still running: jobs {active_jobs()}, {running_tasks()} tasks")
    run = stream.refreshed()
    assert (run.status, run.message) == (RunStatus.FAILED, "transform exceeded [transform] timeout of 3 s")
    assert stream.sink_ids() == Counter()


@contextmanager
def _slice_running(stream: Stream) -> Iterator[tuple[threading.Thread, list[bool]]]:
    """A slice of the stream's driver in a thread of its own, as a worker runs one, once
    its epoch's Spark job runs: yields the thread and the list its outcome goes to. The
    flow is stopped and the thread joined after."""
    outcome: list[bool] = []

    def drive() -> None:
        try:
            outcome.append(driver(stream).run_slice(deadline=time.monotonic() + 240))
        finally:
            connection.close()  # this thread's own

    slice_ = threading.Thread(target=drive)
    slice_.start()
    try:
        wait_until(lambda: running_tasks() > 0, 60, lambda: "the epoch's job did not start")
        yield slice_, outcome
    finally:
        flow_stop(flow=stream.run.flow)
        slice_.join()


@pytest.mark.slow
def test_pausing_a_stream_cancels_its_running_epoch_which_runs_again_once_resumed(dirs):
    stream = Stream(dirs, STREAM_SLOW_SQL, transform={"trigger_ms": 200})
    rows = stream.land("s0", [float(i) for i in range(SLOW_ROWS)])

    with _slice_running(stream):
        flow_pause(flow=stream.run.flow)

        wait_until(spark_is_idle, 30, lambda: f"still running: jobs {active_jobs()}, {running_tasks()} tasks")
        assert stream.sink_ids() == Counter()
        assert TransformEpoch.objects.get(run=stream.run).status == EpochStatus.PLANNED

        flow_resume(flow=stream.run.flow)

        wait_until(lambda: stream.sink_ids() == ids(rows), 180, lambda: f"sink: {len(stream.sink_ids())} ids")
    assert TransformEpoch.objects.filter(run=stream.run, status=EpochStatus.COMMITTED).count() == 1


@pytest.fixture()
def worker_stays():
    """``transforms_give_back`` marks this whole process as a leaving worker: the tests
    after this one run in it, so the mark (a private event) is taken back."""
    yield
    transform_watch._worker_leaving.clear()


@pytest.mark.slow
def test_a_leaving_worker_gives_a_running_epoch_back_without_a_failure(dirs, worker_stays):
    stream = Stream(dirs, STREAM_SLOW_SQL, transform={"trigger_ms": 200})
    rows = stream.land("s0", [float(i) for i in range(SLOW_ROWS)])

    with _slice_running(stream) as (slice_, outcome):
        transforms_give_back()  # what a worker's SIGTERM runs: returns once no epoch runs
        slice_.join(timeout=120)
        assert not slice_.is_alive(), "the slice went on after its worker began to leave"
        assert outcome == [True]  # the run goes on: its next slice is queued for another worker
        run = stream.refreshed()
        assert run.status in ("reading", "transforming") and StreamState.of(run).failures == 0, run.message
        assert TransformEpoch.objects.get(run=run).status == EpochStatus.PLANNED
        assert stream.sink_ids() == Counter()

        transform_watch._worker_leaving.clear()  # the next worker: the epoch runs again, once
        assert driver(stream).run_slice(deadline=time.monotonic() + 60) is True
        assert stream.sink_ids() == ids(rows)
