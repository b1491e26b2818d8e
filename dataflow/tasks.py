"""Celery tasks: each takes ids, calls one service function, and re-queues if asked to.
Services queue them by the names in ``services.queues``, never by importing this module.
Shared tasks: they run on whichever Celery app the project has (its own, or the checkout's
``dataflow.celery``), each a ``DeploymentTask``."""

from __future__ import annotations

from celery import current_app, shared_task

from dataflow.celery_hooks import DeploymentTask
from dataflow.services import flows, health, notify, queues
from dataflow.services.runs import slices, tick, transform
from dataflow.services.streams import driver as stream_driver
from dataflow.services.streams.tick import stream_transform_requeue
from source_support.runtime import SliceOutcome


@shared_task(base=DeploymentTask, name=queues.TICK_FLOW, ignore_result=True)
def tick_flow(flow_id: int) -> None:
    """Beat's periodic tick of a flow: its run's tick waits in its owner's line (fair share)."""
    tick.flow_tick_request(flow_id=flow_id)


@shared_task(base=DeploymentTask, bind=True, name=queues.FAIR_NEXT, ignore_result=True)
def fair_next(self) -> None:
    """A token: runs the next owner's next reader slice or tick (``queues.fair_work_take``)."""
    work = queues.fair_work_take(token_id=self.request.id)
    if work is not None:
        queues.fair_work_run(work, current_app.tasks[work.task].run, token_id=self.request.id)


@shared_task(base=DeploymentTask, name=queues.TICK_RUN, ignore_result=True)
def tick_run(run_id: int) -> None:
    tick.run_tick(run_id=run_id)


@shared_task(base=DeploymentTask, name=queues.READ_SPLITS, ignore_result=True)
def read_splits(run_id: int, subtask: int, token: str | None = None) -> None:
    """One time slice of a reader; it re-queues itself so a fleet is shared fairly."""
    report = slices.read_slice(run_id=run_id, subtask=subtask, token=token)
    if report.outcome == SliceOutcome.CONTINUE:
        slices.reader_requeue(run_id=run_id, subtask=subtask, token=report.token)


@shared_task(base=DeploymentTask, name=queues.RUN_TRANSFORM, ignore_result=True)
def run_transform(run_id: int) -> None:
    transform.transform(run_id=run_id)


@shared_task(base=DeploymentTask, name=queues.STREAM_TRANSFORM, ignore_result=True)
def stream_transform(run_id: int) -> None:
    """One time slice of an unbounded run's streaming transform; it re-queues itself."""
    if stream_driver.stream_transform(run_id=run_id):
        stream_transform_requeue(run_id=run_id)


@shared_task(base=DeploymentTask, name=queues.TRANSFORM_CHECK, ignore_result=True)
def transform_check(run_id: int) -> None:
    transform.transform_check(run_id=run_id)


@shared_task(base=DeploymentTask, name=queues.RUN_SCHEDULED, ignore_result=True)
def run_scheduled(flow_id: int) -> None:
    """A flow's schedule is due: beat sends this from the flow's ``dataflow-schedule:`` entry."""
    flows.flow_run_scheduled(flow_id=flow_id)


@shared_task(
    base=DeploymentTask, bind=True, name=queues.WEBHOOK_DELIVER, ignore_result=True, max_retries=None
)
def webhook_deliver(self, delivery_id: int) -> None:
    """One call of a flow's webhook; the service counts the attempts and says when to call again."""
    countdown = notify.webhook_deliver(delivery_id=delivery_id)
    if countdown is not None:
        raise self.retry(countdown=countdown)


@shared_task(base=DeploymentTask, name=queues.WEBHOOK_DELIVERIES_RESUME, ignore_result=True)
def webhook_deliveries_resume() -> None:
    """Beat, each minute: pending webhook deliveries whose task was lost are sent again."""
    notify.webhook_deliveries_resume()


@shared_task(base=DeploymentTask, name=queues.FLOWS_HEALTH_CHECK, ignore_result=True)
def flows_health_check() -> None:
    """Beat, each minute: flows whose sink has not moved for their freshness become stale."""
    health.flows_health_check()
