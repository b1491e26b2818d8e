"""Queueing a run's work by task name, so no service imports ``dataflow.tasks`` (the
tasks call the services, as Zulip's actions publish events by queue name); and which Celery
queue a run's tasks go to: the shared one, or that of a ``runflow``.

``runflow NAME`` runs an in-process worker next to whatever fleet shares the broker. It
must run only its own flow's tasks, so while it runs a flow it claims a queue of its own
(``<default queue>.runflow.<flow name>``) and every task of that flow's runs (ticks, reader
slices, the transform check, the Spark job) is sent there instead of the shared queue.
The claim is a Redis key that ``runflow`` renews as it ticks and that lapses by itself:
should ``runflow`` die, the flow's next tasks go to the shared queue again, where a fleet
takes them up (what was queued for the dead ``runflow`` is stale: readers and the
transform are leased, so a lost task is replaced, never needed).

A ``runflow`` whose readers run in child processes (``DATAFLOW_RUNFLOW_READER_PROCESSES``)
claims with them a queue per child (``<runflow queue>.readers.<k>``): reader ``subtask``'s
slices go to child ``subtask % children``, always the same one, so a reader's next slice
finds the Kafka consumer its last slice kept open in that process.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery import current_app
from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.db import IntegrityError

from dataflow.models import ACTIVE_RUN_STATUSES, DataFlow, FlowRun
from dataflow.redis_client import get_redis

log = logging.getLogger(__name__)

#: The tasks of a run, by the names ``dataflow.tasks`` registers them under.
TICK_FLOW = "dataflow.tasks.tick_flow"
TICK_RUN = "dataflow.tasks.tick_run"
READ_SPLITS = "dataflow.tasks.read_splits"
RUN_TRANSFORM = "dataflow.tasks.run_transform"
STREAM_TRANSFORM = "dataflow.tasks.stream_transform"
TRANSFORM_CHECK = "dataflow.tasks.transform_check"
RUN_SCHEDULED = "dataflow.tasks.run_scheduled"
WEBHOOK_DELIVER = "dataflow.tasks.webhook_deliver"
WEBHOOK_DELIVERIES_RESUME = "dataflow.tasks.webhook_deliveries_resume"
FLOWS_HEALTH_CHECK = "dataflow.tasks.flows_health_check"


def broker_key_prefix() -> str:
    """What every Redis key of the broker begins with (kombu's ``global_keyprefix``): the
    deployment's namespace, so two deployments on one server keep their queues apart."""
    return settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "")


def deployment_queues() -> list[str]:
    """The Celery queues of this deployment by name: the shared one, the Spark queue (if
    it is another), and the pattern of ``runflow``'s (``<shared>.runflow.*``). In Redis each
    is a key under ``broker_key_prefix()``."""
    shared = settings.CELERY_TASK_DEFAULT_QUEUE
    routed = {route.get("queue", shared) for route in settings.CELERY_TASK_ROUTES.values()}
    return [shared, *sorted(routed - {shared}), f"{shared}.runflow.*"]


def deployment_broker_keys() -> list[str]:
    """Glob patterns of every Redis key the broker may use for this deployment: its queues
    (each with kombu's priority variants), kombu's bindings, unacked sets and control
    channels, all under ``broker_key_prefix()``; without a prefix, the names kombu uses."""
    prefix = broker_key_prefix()
    if prefix:
        return [f"{prefix}*"]
    queues = [f"{queue}*" for queue in deployment_queues()]
    return [*queues, "_kombu.*", "unacked*", "celery*", "/*"]


#: How long a claim outlives its last renewal (``runflow`` renews it at every tick),
#: at least.
RUNFLOW_CLAIM_TTL_S = 30


def runflow_queue_name(flow: DataFlow) -> str:
    """The queue that a ``runflow`` of ``flow`` consumes, and no other process does."""
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}.runflow.{flow.name}"


def _claim_key(flow_id: int, flow_name: str) -> str:
    # By id and name: a database made anew (ids start again) reuses an id for another
    # flow only under another name, or under the same name, which is then the same flow.
    return f"{settings.DATAFLOW_REDIS_NAMESPACE}:runflow-queue:{flow_id}:{flow_name}"


def runflow_reader_queue(queue: str, index: int) -> str:
    """The queue of child ``index`` of the ``runflow`` that consumes ``queue``, which runs
    its readers (``runflow_claim`` with ``reader_queues``)."""
    return f"{queue}.readers.{index}"


def runflow_claim(flow: DataFlow, *, reader_queues: int = 0) -> str:
    """Sends the flow's tasks to its ``runflow`` queue for the next ``RUNFLOW_CLAIM_TTL_S``
    seconds (called again to renew); returns the queue. With ``reader_queues`` (N > 0),
    reader slices go to the N queues of ``runflow``'s reader processes instead, reader
    ``subtask`` to ``runflow_reader_queue(queue, subtask % N)``."""
    queue = runflow_queue_name(flow)
    ttl_s = max(RUNFLOW_CLAIM_TTL_S, 3 * settings.DATAFLOW_TICK_SECONDS)
    claim = f"{queue} {reader_queues}" if reader_queues > 0 else queue
    get_redis().set(_claim_key(flow.pk, flow.name), claim, ex=ttl_s)
    return queue


def runflow_release(flow: DataFlow) -> None:
    """The flow's tasks go to the shared queue again (``runflow`` is leaving)."""
    get_redis().delete(_claim_key(flow.pk, flow.name))


def run_queue(run_id: int) -> str | None:
    """The queue of the ``runflow`` that runs the run's flow, if one does; None: the
    task's usual route (the shared queue, or the Spark queue)."""
    flow = FlowRun.objects.filter(pk=run_id).values_list("flow_id", "flow__name").first()
    claim = None if flow is None else _claim(*flow)
    return None if claim is None else claim[0]


def _claim(flow_id: int, flow_name: str) -> tuple[str, int] | None:
    """The claimed queue and how many reader queues go with it (0: none), if claimed."""
    claim = get_redis().get(_claim_key(flow_id, flow_name))
    # bytes, or None without a claim (redis-py types a reply as possibly awaitable)
    if not isinstance(claim, bytes):
        return None
    queue, _, readers = claim.decode().partition(" ")
    return queue, int(readers or 0)


def _task_queue(claim: tuple[str, int] | None, task: str, args: tuple[Any, ...]) -> str | None:
    """Where a claimed flow's ``task`` with ``args`` (after the run id) goes."""
    if claim is None:
        return None
    queue, readers = claim
    if task == READ_SPLITS and readers > 0 and args:
        return runflow_reader_queue(queue, int(args[0]) % readers)
    return queue


def run_task_send(task: str, run_id: int, *args: Any) -> None:
    """Queues the task named ``task`` with ``(run_id, *args)`` where the run's tasks go (see
    ``run_queue``, and ``runflow_claim`` for reader slices; without a ``runflow``,
    ``CELERY_TASK_ROUTES`` routes it by its name).
    A reader slice or a tick for the shared queue waits in its owner's line instead
    (``fair_work_send``), so that owners share the fleet fairly."""
    flow = FlowRun.objects.filter(pk=run_id).values_list("flow_id", "flow__name", "flow__owner_id").first()
    queue = None if flow is None else _task_queue(_claim(flow[0], flow[1]), task, args)
    if queue is None and flow is not None and task in FAIR_TASKS:
        fair_work_send(task, run_id, *args, owner_id=flow[2])
        return
    options: dict[str, Any] = {} if queue is None else {"queue": queue}
    current_app.send_task(task, args=(run_id, *args), **options)


# Fair shares among owners.
#
# Celery's queue is first in, first out: one owner's backlog (130 flows' ticks and reader
# slices) made another's first slice wait minutes. So a reader slice or a tick is not a
# Celery task of its own: it waits in a line per owner in Redis, and the shared queue gets a
# token (``FAIR_NEXT``) for it. A worker that takes a token runs the head of the next owner's
# line in turn (round robin over the owners with work waiting), whichever owner's work the
# token was sent for: tokens are alike, so neither the order of the queue nor what workers
# prefetched decides whose work runs next. An owner's first slice thus waits for at most
# one slice of each other owner with work waiting. A line holds one item per run's tick and
# per reader (a second is dropped: the first does the same work), which also bounds what
# waits. A token lost with a worker leaves one item waiting until the next token, and every
# send makes one, a dropped second included (the periodic tick sends again what a lost
# slice would have done), so no item waits for good: nothing is lost.

#: The token task: runs the next owner's next piece of work.
FAIR_NEXT = "dataflow.tasks.fair_next"
#: The tasks that wait in their owner's line rather than in Celery's queue.
FAIR_TASKS = frozenset({READ_SPLITS, TICK_RUN})

# KEYS: the owners' round (list), the owners in it (set), the items waiting (set of keys).
# ARGV: owner, item (JSON), the item's key, the lines' key prefix. 1 if queued, 0 if an
# item of that key was waiting already.
_FAIR_PUSH = """
if redis.call('sadd', KEYS[3], ARGV[3]) == 0 then return 0 end
redis.call('rpush', ARGV[4] .. ARGV[1], ARGV[2])
if redis.call('sadd', KEYS[2], ARGV[1]) == 1 then redis.call('rpush', KEYS[1], ARGV[1]) end
return 1
"""
# The head of the line of the owner whose turn it is; that owner goes to the back of the
# round if it has more waiting. nil if nothing waits.
_FAIR_TAKE = """
for _ = 1, 64 do
  local owner = redis.call('lpop', KEYS[1])
  if not owner then return nil end
  local line = ARGV[1] .. owner
  local item = redis.call('lpop', line)
  if redis.call('llen', line) > 0 then
    redis.call('rpush', KEYS[1], owner)
  else
    redis.call('srem', KEYS[2], owner)
  end
  if item then
    redis.call('srem', KEYS[3], cjson.decode(item)['key'])
    return item
  end
end
return nil
"""


def _fair_key(name: str) -> str:
    return f"{settings.DATAFLOW_REDIS_NAMESPACE}:fair:{name}"


def _fair_keys() -> list[str]:
    return [_fair_key("round"), _fair_key("owners"), _fair_key("waiting")]


def fair_work_send(task: str, run_id: int, *args: Any, owner_id: int | None) -> bool:
    """Puts ``task(run_id, *args)`` in the line of ``owner_id`` (None: the operator's flows)
    and queues a token for it; False if the same work (a run's tick, a reader of a run)
    was waiting already."""
    key = f"{task}:{run_id}" + (f":{args[0]}" if task == READ_SPLITS and args else "")
    item = json.dumps({"task": task, "args": [run_id, *args], "key": key})
    client = get_redis()
    pushed = client.eval(_FAIR_PUSH, 3, *_fair_keys(), str(owner_id or 0), item, key, _fair_key("line:"))
    # A token even when the same work was waiting: that work's own token may have been lost
    # with a worker killed while it held it prefetched (tasks are acked on receipt), and
    # then only a new token takes it. A token that finds nothing waiting ends at once.
    current_app.send_task(FAIR_NEXT)
    return bool(pushed)


@dataclass(frozen=True)
class FairWork:
    """A piece of work taken from an owner's line: a task's name and its arguments."""

    task: str
    args: list[Any]

    @property
    def run_id(self) -> int:
        return self.args[0]


def fair_work_take(*, token_id: str | None = None) -> FairWork | None:
    """The next owner's next piece of work (see above), if any waits and its run is still
    going; the work of a run that ended or was deleted meanwhile is dropped here (logged
    at debug: a stopped or deleted flow leaves its lines behind by design). What the token
    ``token_id`` (its Celery task id) runs is kept until ``fair_work_run`` ends it, for
    ``fair_work_running``."""
    client = get_redis()
    while True:
        raw = client.eval(_FAIR_TAKE, 3, *_fair_keys(), _fair_key("line:"))
        if raw is None:
            return None
        item = json.loads(raw)  # pyright: ignore[reportArgumentType] - a sync client's reply: bytes
        work = FairWork(item["task"], item["args"])
        if FlowRun.objects.filter(pk=work.run_id, status__in=ACTIVE_RUN_STATUSES).exists():
            if token_id:
                client.hset(_fair_key("running"), token_id, raw)  # pyright: ignore[reportArgumentType]
            return work
        log.debug(
            "dropped queued %s of run %s: the run ended or its flow was deleted", work.task, work.run_id
        )


def fair_work_running(*, token_id: str) -> FairWork | None:
    """What the token task ``token_id`` is running now (None: nothing, or not a token)."""
    raw = get_redis().hget(_fair_key("running"), token_id)
    if raw is None:
        return None
    item = json.loads(raw)  # pyright: ignore[reportArgumentType] - a sync client's reply: bytes
    return FairWork(item["task"], item["args"])


def fair_work_run(work: FairWork, call: Callable[..., Any], *, token_id: str | None = None) -> None:
    """Runs ``call(*work.args)`` (the task's body); a run deleted while it ran (its rows
    gone under it: an IntegrityError, a row that does not exist) ends it quietly, logged
    at debug."""
    try:
        call(*work.args)
    except (IntegrityError, ObjectDoesNotExist):
        if FlowRun.objects.filter(pk=work.run_id).exists():
            raise
        log.debug("dropped %s of run %s: its flow was deleted while it ran", work.task, work.run_id)
    finally:
        if token_id:
            get_redis().hdel(_fair_key("running"), token_id)
