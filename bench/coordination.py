"""Coordination benchmark: 100,000 splits, 200 simulated readers, real Redis and PostgreSQL.

``python bench/coordination.py`` (needs DATABASE_URL to a PostgreSQL database and REDIS_URL;
defaults: postgres://postgres@127.0.0.1:5432/adf_bench and redis://127.0.0.1:6379/12)
creates a flow over the sequence source with 100,000 splits (``--source files``: 100,000
small CSV files, one split each) and starts a run. One process
drives the enumerator ticks (the real ``enumerator_tick`` with the flow's source, the Redis
``RedisRunCoordinator`` and the database ``DjangoRunStore``); reader processes run 200 reader
threads that register, request splits, heartbeat, and finish each split they are given
through the store's fenced commit, as real readers do, without reading data. Midway,
20 readers "crash" holding a split after their third (they stop heartbeating), and the ticks must return
their splits once the leases lapse.

It checks that every split was finished exactly once, then prints as its last line:
``assignments_per_s=<n> enumerator_tick_s=<s> splits=100000 readers=200``
where ``assignments_per_s`` = assignments / wall time from the first request to the last
finish, and ``enumerator_tick_s`` is the slowest tick seen at that size (p50 and the
lease-expiry tick are printed too).
"""

from __future__ import annotations

import argparse
import cProfile
import multiprocessing as mp
import os
import resource
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/adf_bench")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/12")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dataflow.settings")
os.environ.setdefault("DATAFLOW_READER_LEASE_SECONDS", "3")
os.environ.setdefault("DJANGO_DEBUG", "0")
os.environ.setdefault("DATAFLOW_ALLOWED_ROOTS", f"{REPO / 'var'}:{REPO / 'out'}")
os.environ["DATAFLOW_LOG_LEVEL"] = "WARNING"


def setup_django() -> None:
    import django

    django.setup()


def reader_process(run_id: int, subtasks: list[int], crash: set[int], threads: int, finished_q) -> None:
    """Simulates ``subtasks`` readers on ``threads`` threads, so 200 readers need no 200
    database connections. Each thread steps through its readers in turn and then waits
    on all their notice lists at once (one BLPOP), as each real reader waits on its own."""
    setup_django()
    from django.db import connection

    from dataflow.models import FlowRun
    from dataflow.services.context import coordinator_for
    from dataflow.store import DjangoRunStore
    from source_support.coordination import decode_notices
    from source_support.runtime import SPLIT_REQUEST_RETRY_S, BatchCommit, ReaderSettings

    per_commit = ReaderSettings.max_batches_per_commit  # as many batches as a reader commits at once

    run = FlowRun.objects.get(pk=run_id)
    counts = []

    class Reader:
        """The steps of ``source_support.runtime.reader_slice``, without the reading."""

        def __init__(self, subtask: int, coordinator, store) -> None:
            self.subtask, self.coordinator, self.store = subtask, coordinator, store
            self.token, self.held, self.done, self.finished = None, {}, 0, False
            self.crashes = subtask in crash
            self.requested_at = self.beat_at = 0.0
            self.key = coordinator.keys.assigned(subtask)

        def adopt(self, rows) -> None:
            for split_id, payload, position in rows:
                # where reading the split would end (a files split: its byte range, or one
                # byte on for a whole small file; nothing is read)
                end = payload["end"] if payload.get("end", -1) > 0 else position + 1
                self.held.setdefault(split_id, (end, position))

        def step(self) -> bool:
            """One turn; True if the reader now waits for a notice."""
            now = time.monotonic()
            if self.token is None:  # a replacement waits for a crashed instance's lease to lapse
                self.token = self.coordinator.acquire_reader(self.subtask, None, f"bench:{os.getpid()}")
                if self.token:
                    self.adopt(self.store.owned_splits(self.subtask, self.token))
                return False
            if now - self.beat_at >= self.coordinator.lease_ms / 3000:
                if not self.coordinator.heartbeat(self.subtask, self.token):
                    self.token, self.held = None, {}  # lost: a new instance takes over
                    return False
                self.beat_at = now
            if self.held:
                if self.crashes and self.done >= 3:
                    self.crashes, self.token, self.held = False, None, {}  # goes silent holding splits
                    return False
                # Every held split read to its end, committed together as a reader commits
                # the batches it landed within one commit interval.
                commits = [
                    BatchCommit(split_id, position, end, None, end - position, [], True)
                    for split_id, (end, position) in self.held.items()
                ]
                for at in range(0, len(commits), per_commit):
                    self.done += len(self.store.commit_batches(self.token, commits[at : at + per_commit]))
                self.held, self.requested_at = {}, 0.0
            if not self.requested_at or now - self.requested_at > SPLIT_REQUEST_RETRY_S:
                if self.requested_at:
                    self.adopt(self.store.owned_splits(self.subtask, self.token))
                self.coordinator.request_split(self.subtask)
                self.requested_at = now
            return not self.held

        def on_wake(self, rows) -> None:
            self.adopt(rows)
            if not self.held and self.coordinator.no_more_splits(self.subtask, self.token):
                self.adopt(self.store.owned_splits(self.subtask, self.token))
                if not self.held:
                    self.coordinator.release_reader(self.subtask, self.token, done=True)
                    self.finished = True

    def loop(subtasks: list[int]) -> None:
        coordinator, store = coordinator_for(run), DjangoRunStore(run)
        readers = [Reader(s, coordinator, store) for s in subtasks]
        try:
            while not all(r.finished for r in readers):
                waiting = {r.key: r for r in readers if not r.finished and r.step()}
                if not waiting:
                    time.sleep(0.001)
                    continue
                popped = coordinator.redis.blpop(list(waiting), timeout=0.05)
                if popped:
                    key = popped[0].decode()
                    rest = coordinator.redis.lpop(key, 10_000) or []
                    if waiting[key].token:
                        waiting[key].on_wake(decode_notices([popped[1], *rest]))
        finally:
            counts.append(sum(r.done for r in readers))
            connection.close()

    workers = [threading.Thread(target=loop, args=(subtasks[i::threads],)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    # The process's peak resident memory (ru_maxrss is in KiB on Linux).
    finished_q.put((sum(counts), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=100_000)
    parser.add_argument(
        "--source",
        choices=["sequence", "files"],
        default="sequence",
        help="sequence: Flink's NumberSequenceSource; files: one small CSV file per split, "
        "discovered by the files enumerator (the files are made once under var/bench-files)",
    )
    parser.add_argument("--readers", type=int, default=200)
    parser.add_argument(
        "--processes", type=int, default=4, help="reader processes (threads split among them)"
    )
    parser.add_argument("--crashes", type=int, default=20)
    parser.add_argument("--threads", type=int, default=8, help="threads per reader process")
    parser.add_argument("--profile", metavar="FILE", help="write a cProfile of the tick loop to FILE")
    args = parser.parse_args()

    fresh_database()
    setup_django()
    from django.core.management import call_command
    from django.db import transaction

    call_command("migrate", verbosity=0)
    from dataflow.models import FlowRun, Split, SplitStatus
    from dataflow.redis_client import get_redis
    from dataflow.services.context import coordinator_for, source_for
    from dataflow.services.flows import flow_apply, flow_start
    from dataflow.store import DjangoRunStore
    from source_support.runtime import enumerator_tick

    get_redis().flushdb()
    flow, _ = flow_apply(
        spec={
            "flow": {"name": "bench-coordination", "parallelism": args.readers, "batch_size": 1000},
            "source": source_spec(args),
            **({"format": {"type": "csv", "schema": "id BIGINT"}} if args.source == "files" else {}),
            "transform": {"sql": "SELECT * FROM source"},
            "sink": {"type": "parquet", "path": "out/bench-coordination"},
        }
    )
    began = time.perf_counter()
    run = flow_start(flow=flow)  # a static source discovers its splits here, not in a tick
    start_s = time.perf_counter() - began
    source, coordinator, store = source_for(run), coordinator_for(run), DjangoRunStore(run)

    crash = set(range(0, args.readers, max(1, args.readers // max(1, args.crashes))))
    crash = set(sorted(crash)[: args.crashes])
    per_process = [list(range(args.readers))[i :: args.processes] for i in range(args.processes)]
    finished_q = mp.get_context("spawn").Queue()
    procs = [
        mp.get_context("spawn").Process(
            target=reader_process, args=(run.pk, subtasks, crash & set(subtasks), args.threads, finished_q)
        )
        for subtasks in per_process
    ]
    for p in procs:
        p.start()

    ticks: list[float] = []  # the slowest pass of each tick call (see TickResult)
    calls: list[float] = []
    expiry_ticks: list[float] = []
    assigned = 0
    rss_samples = []
    started = wall = None
    profile = cProfile.Profile() if args.profile else None
    if profile:
        profile.enable()
    while any(p.is_alive() for p in procs):
        began = time.perf_counter()
        result = enumerator_tick(
            source=source,
            coordinator=coordinator,
            store=store,
            parallelism=args.readers,
            atomic=transaction.atomic,
        )
        took = time.perf_counter() - began
        if result is None:
            continue
        if result.assigned and started is None:
            started = began
        if wall is None:  # after the last finish, ticks only tell readers there is no more
            assigned += result.assigned
            ticks.append(result.slowest_pass_s)
            calls.append(took)
            if len(result.live) < args.readers and started is not None:
                expiry_ticks.append(result.slowest_pass_s)
            rss_samples.append(current_rss_mib())
            if (
                result.exhausted
                and not Split.objects.filter(run=run).exclude(status=SplitStatus.FINISHED).exists()
            ):
                wall = time.perf_counter() - started
        if not result.assigned:
            time.sleep(0.002)
    if profile:
        profile.disable()
        profile.dump_stats(args.profile)
    if wall is None:
        sys.exit("FAILED: the readers stopped before every split was finished")
    reports = [finished_q.get(timeout=60) for _ in procs]
    finished = sum(count for count, _ in reports)
    reader_peaks = [peak for _, peak in reports]
    for p in procs:
        p.join(timeout=60)

    splits = Split.objects.filter(run=run)
    total, done = splits.count(), splits.filter(status=SplitStatus.FINISHED).count()
    from dataflow.models import Assignment

    expired = Assignment.objects.filter(split__run=run, outcome="expired").count()
    print(f"run start (flow_start, which discovers the splits of a files source): {start_s:.2f}s")
    print(f"splits finished: {done}/{args.splits} (rows {total}); commits by readers: {finished}")
    print(f"assignments: {assigned} (expired leases returned: {expired}) in {wall:.2f}s")
    print(
        f"ticks: {len(ticks)} calls, slowest pass p50 {statistics.median(ticks) * 1000:.1f} ms, "
        f"max {max(ticks) * 1000:.1f} ms; slowest call {max(calls) * 1000:.1f} ms; "
        f"ticks while readers were missing: {len(expiry_ticks)}, max {max(expiry_ticks, default=0) * 1000:.1f} ms"
    )
    middle = rss_samples[len(rss_samples) // 2]
    print(
        f"tick process RSS: after the first tick {rss_samples[0]:.0f} MiB, "
        f"halfway {middle:.0f} MiB, after the last {rss_samples[-1]:.0f} MiB"
    )
    print(
        f"reader processes ({len(procs)}, {args.readers} readers): peak RSS "
        + ", ".join(f"{peak:.0f}" for peak in reader_peaks)
        + " MiB"
    )
    if done != args.splits or total != args.splits or finished != args.splits:
        sys.exit(f"FAILED: {done} finished of {args.splits}, {finished} commits")
    FlowRun.objects.filter(pk=run.pk).update(status="stopped")
    print(
        f"assignments_per_s={assigned / wall:.0f} enumerator_tick_s={max(ticks):.3f} "
        f"splits={args.splits} readers={args.readers}"
    )


def source_spec(args) -> dict:
    if args.source == "sequence":
        return {"type": "sequence", "count": args.splits * 10, "splits": args.splits}
    root = REPO / "var" / "bench-files" / str(args.splits)
    if not (root / "done").exists():
        for i in range(args.splits):
            folder = root / f"{i // 1000:04d}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{i:07d}.csv").write_text(f"id\n{i}\n")
        (root / "done").touch()
    return {"type": "files", "path": f"{root}/*/*.csv"}


def current_rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


def fresh_database() -> None:
    """Creates the benchmark's PostgreSQL database anew, as a new deployment starts: no
    rows or planner statistics left from an earlier run."""
    import dj_database_url
    import psycopg

    db = dj_database_url.parse(os.environ["DATABASE_URL"])
    if "postgresql" not in db["ENGINE"]:
        sys.exit("bench/coordination.py measures PostgreSQL: set DATABASE_URL to a postgres:// URL")
    admin = psycopg.connect(
        host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"], dbname="postgres", autocommit=True
    )
    admin.execute(f'DROP DATABASE IF EXISTS "{db["NAME"]}" WITH (FORCE)')
    admin.execute(f'CREATE DATABASE "{db["NAME"]}"')
    admin.close()


if __name__ == "__main__":
    main()
