"""What the app adds to whichever Celery app runs its tasks (a host project's own, or the
checkout's ``dataflow.celery``): the tasks' base class, which runs only this deployment's
tasks, and the signal handlers that sign each task sent, check the landing zone as a worker
starts, warm Spark in a worker that takes Spark tasks and give transforms back as it leaves.
Loaded by ``DataflowConfig.ready()`` in every process that loads the app; Celery's signals
are the same for every app in a process."""

from __future__ import annotations

import logging
import signal
import threading

import psutil
from celery import Task
from celery.exceptions import Reject
from celery.signals import (
    before_task_publish,
    celeryd_after_setup,
    worker_init,
    worker_process_init,
    worker_ready,
    worker_shutting_down,
)
from django.conf import settings
from django.core.checks import Error

from dataflow.checks import check_landing_zone

#: The message header that carries the sender's deployment identity (``services.deployment``).
DEPLOYMENT_HEADER = "adf_deployment"


class DeploymentTask(Task):
    """Every task of the app: it runs only if this deployment sent it (the identity header
    ``before_task_publish`` adds below); a stranger's task is logged as an error and
    rejected, never run (see ``services.deployment``)."""

    def __call__(self, *args, **kwargs):
        request = self.request
        if not request.called_directly and not request.is_eager:
            from dataflow.services.deployment import task_sender_refused  # noqa: PLC0415 - app registry

            refused = task_sender_refused(task=self.name, sender=getattr(request, DEPLOYMENT_HEADER, None))
            if refused:
                raise Reject(refused, requeue=False)
        return super().__call__(*args, **kwargs)


@before_task_publish.connect
def _sign_with_the_deployment(headers=None, **kwargs) -> None:
    """Every task this process sends carries the deployment's identity (see
    ``DeploymentTask``), unless it is sent on with the identity it came with."""
    if headers is not None and not headers.get(DEPLOYMENT_HEADER):
        from dataflow.services.deployment import deployment_identity  # noqa: PLC0415 - app registry

        headers[DEPLOYMENT_HEADER] = deployment_identity()


@worker_init.connect
def _refuse_a_landing_zone_that_cannot_work(**kwargs) -> None:
    """Workers run no Django system checks; run the landing-zone one before taking tasks."""
    errors = [e for e in check_landing_zone(None) if isinstance(e, Error)]
    if errors:
        raise SystemExit("\n".join(f"{e.id}: {e.msg} {e.hint or ''}" for e in errors))


#: Where this worker's Spark tasks run, if it warms Spark as it starts: "process" (threads
#: or solo pool), "child" (its one prefork pool process), "" (none: it takes no Spark task,
#: has several pool processes, or ``DATAFLOW_WORKER_SPARK_WARM_UP`` is off).
_spark_warm_up_in = ""

#: One of the tasks that run Spark; ``CELERY_TASK_ROUTES`` sends the three to one queue.
SPARK_TASK = "dataflow.tasks.run_transform"


@celeryd_after_setup.connect
def _plan_spark_warm_up(sender=None, instance=None, **kwargs) -> None:
    """A worker (``celery worker``, before its pool starts) that takes Spark tasks warms
    its Spark session as it starts, so that a fleet's first run does not wait for a JVM and
    a cold first job (see ``warm_up_with_job``). A prefork worker does so only with one pool
    process: each would start a JVM of its own."""
    global _spark_warm_up_in
    if instance is None or not settings.DATAFLOW_WORKER_SPARK_WARM_UP:
        return
    route = settings.CELERY_TASK_ROUTES.get(SPARK_TASK, {})
    spark_queue = route.get("queue", settings.CELERY_TASK_DEFAULT_QUEUE)
    if spark_queue not in instance.app.amqp.queues.consume_from:
        return
    pool = getattr(instance.pool_cls, "__module__", "")
    if pool.endswith(".prefork"):
        _spark_warm_up_in = "child" if instance.concurrency == 1 else ""
    else:
        _spark_warm_up_in = "process"


@worker_ready.connect
def _warm_spark_in_the_worker(**kwargs) -> None:
    if _spark_warm_up_in == "process":
        _warm_spark()


#: Sent by a leaving worker's main process to its pool processes (prefork), whose tasks run
#: there; Celery itself uses TERM, HUP, USR1, INT and QUIT.
GIVE_BACK_SIGNAL = signal.SIGUSR2


@worker_shutting_down.connect
def _give_back_transforms(**kwargs) -> None:
    """SIGTERM (a warm shutdown) must not leave a transform holding its run until its lease
    lapses, nor running until it ends: the transforms of this worker give their runs back
    at once (``transform_watch.transforms_give_back``), in this process (threads and solo pools) and in
    its pool processes (prefork). Runs in a signal handler: the work goes to a thread."""
    _give_back_in_background()
    me = psutil.Process()
    for child in me.children():
        try:
            if child.exe() == me.exe():  # a pool process, not a Spark JVM this process started
                child.send_signal(GIVE_BACK_SIGNAL)
        except psutil.Error:
            continue


@worker_process_init.connect
def _pool_process_gives_back_on_notice(**kwargs) -> None:
    """A prefork pool process gives its transforms back when its worker leaves (above)."""

    def notice(signum, frame) -> None:
        _give_back_in_background()

    signal.signal(GIVE_BACK_SIGNAL, notice)
    if _spark_warm_up_in == "child":
        _warm_spark()


def _warm_spark() -> None:
    # Imported here: this module loads with Django's settings (dataflow/__init__.py), and
    # every process that imports dataflow (web, beat, manage.py) would load PySpark.
    from dataflow.spark.session import warm_up_with_job  # noqa: PLC0415 - PySpark only where it runs

    warm_up_with_job()


def _give_back_in_background() -> None:
    # Imported here: this module loads with Django's settings, before the app registry that
    # the services' models need is ready; a worker that leaves has it ready.
    from dataflow.services.transform_watch import transforms_give_back  # noqa: PLC0415 - app registry

    threading.Thread(target=transforms_give_back, name="give-back", daemon=True).start()


class _QuietRoutineTasks(logging.Filter):
    """Drops the INFO lines a worker writes for each run of a routine task (a flow's tick
    every few seconds, each reader slice), which would bury everything else; warnings and
    errors about them still pass."""

    ROUTINE = (
        "dataflow.tasks.tick_flow",
        "dataflow.tasks.tick_run",
        "dataflow.tasks.read_splits",
        "dataflow.tasks.fair_next",
    )

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        message = record.getMessage()
        return not any(f"{name}[" in message for name in self.ROUTINE)


for _name in ("celery.app.trace", "celery.worker.strategy"):
    logging.getLogger(_name).addFilter(_QuietRoutineTasks())
