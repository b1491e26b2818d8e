"""A worker's log is not buried under a line per tick and per reader slice."""

from __future__ import annotations

import logging

import dataflow.celery  # noqa: F401 - installs the filter


def _logged(logger_name: str, level: int, message: str, caplog) -> bool:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=logger_name):
        logging.getLogger(logger_name).log(level, message)
    return bool(caplog.records)


def test_routine_task_lines_are_dropped_and_others_kept(caplog):
    received = "Task dataflow.tasks.tick_flow[5c0e] received"
    done = "Task dataflow.tasks.read_splits[77aa] succeeded in 0.01s: None"

    assert not _logged("celery.worker.strategy", logging.INFO, received, caplog)
    assert not _logged("celery.app.trace", logging.INFO, done, caplog)
    assert _logged("celery.app.trace", logging.ERROR, "Task dataflow.tasks.tick_flow[5c0e] raised", caplog)
    assert _logged("celery.app.trace", logging.INFO, "Task dataflow.tasks.run_transform[1] succeeded", caplog)
