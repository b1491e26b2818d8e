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
"""

from __future__ import annotations

from typing import Any

from celery import current_app
from django.conf import settings

from dataflow.models import DataFlow, FlowRun
from dataflow.redis_client import get_redis

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


def runflow_claim(flow: DataFlow) -> str:
    """Sends the flow's tasks to its ``runflow`` queue for the next ``RUNFLOW_CLAIM_TTL_S``
    seconds (called again to renew); returns the queue."""
    queue = runflow_queue_name(flow)
    ttl_s = max(RUNFLOW_CLAIM_TTL_S, 3 * settings.DATAFLOW_TICK_SECONDS)
    get_redis().set(_claim_key(flow.pk, flow.name), queue, ex=ttl_s)
    return queue


def runflow_release(flow: DataFlow) -> None:
    """The flow's tasks go to the shared queue again (``runflow`` is leaving)."""
    get_redis().delete(_claim_key(flow.pk, flow.name))


def run_queue(run_id: int) -> str | None:
    """The queue of the ``runflow`` that runs the run's flow, if one does; None: the
    task's usual route (the shared queue, or the Spark queue)."""
    flow = FlowRun.objects.filter(pk=run_id).values_list("flow_id", "flow__name").first()
    if flow is None:
        return None
    queue = get_redis().get(_claim_key(*flow))
    # bytes, or None without a claim (redis-py types a reply as possibly awaitable)
    return queue.decode() if isinstance(queue, bytes) else None


def run_task_send(task: str, run_id: int, *args: Any) -> None:
    """Queues the task named ``task`` with ``(run_id, *args)`` where the run's tasks go (see
    ``run_queue``; without a ``runflow``, ``CELERY_TASK_ROUTES`` routes it by its name)."""
    queue = run_queue(run_id)
    options: dict[str, Any] = {} if queue is None else {"queue": queue}
    current_app.send_task(task, args=(run_id, *args), **options)
