"""Services queue work by task name (``services.queues``): each name is a registered task."""

from __future__ import annotations

from dataflow import tasks
from dataflow.celery import app
from dataflow.services import queues


def test_every_queued_name_is_a_registered_task():
    names = {value for key, value in vars(queues).items() if key.isupper() and isinstance(value, str)}
    names = {name for name in names if name.startswith("dataflow.tasks.")}
    assert len(names) == 11
    assert names <= set(app.tasks), names - set(app.tasks)
    assert {getattr(tasks, name.rsplit(".", 1)[1]).name for name in names} == names
