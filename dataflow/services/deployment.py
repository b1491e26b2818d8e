"""This deployment's identity, which every Celery task it sends carries (a header, set as
the task is published: ``dataflow/celery_hooks.py``), and the worker's check of it.

Two deployments on one Redis server keep apart by ``DATAFLOW_REDIS_NAMESPACE``: their
broker keys (queues, kombu's bindings and unacked sets) are under ``<namespace>:celery:``
(``queues.broker_key_prefix``). Should two share a namespace anyway (a copied environment
file), a task names only numeric ids, which mean other flows in the other database: the
identity (the namespace and the random id the first ``migrate`` stored in the database)
makes a worker refuse a stranger's task, loudly, instead of running it as a no-op or on
the wrong rows.
"""

from __future__ import annotations

import logging
import threading
import uuid

from django.conf import settings
from django.db import IntegrityError, transaction

from dataflow.models import Deployment

log = logging.getLogger(__name__)

_lock = threading.Lock()
_identity: str | None = None


def deployment_identity() -> str:
    """``<namespace>/<id>``: the namespace and the id stored in the database (made here
    if the first ``migrate`` did not), read once per process."""
    global _identity
    with _lock:
        if _identity is None:
            _identity = f"{settings.DATAFLOW_REDIS_NAMESPACE}/{_stored_uid()}"
        return _identity


def _stored_uid() -> str:
    uid = Deployment.objects.filter(pk=1).values_list("uid", flat=True).first()
    if uid is not None:
        return uid
    try:
        with transaction.atomic():
            return Deployment.objects.create(pk=1, uid=uuid.uuid4().hex).uid
    except IntegrityError:  # another process made it first
        return Deployment.objects.get(pk=1).uid


def task_sender_refused(*, task: str, sender: str | None) -> str | None:
    """Why a task sent by ``sender`` (its identity header, None without one) must not
    run here; None if it is this deployment's. Logged as an error: a stranger's task on
    our queue means two deployments share a broker and a namespace."""
    mine = deployment_identity()
    if sender == mine:
        return None
    reason = (
        f"task {task} refused: sent by deployment {sender!r}, this worker is {mine!r}"
        if sender
        else f"task {task} refused: it carries no deployment identity, this worker is {mine!r}"
    )
    log.error(
        "%s; two deployments share this broker and DATAFLOW_REDIS_NAMESPACE: give each a namespace of its own",
        reason,
    )
    return reason
