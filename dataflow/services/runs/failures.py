"""What a run that fails on its splits says: every failed split's error, and the inputs of
the splits it had not read yet that are gone as well (its source tells: objects deleted
since the listing, for one), so that the first failure does not hide the others and the
user fixes them all before the next run."""

from __future__ import annotations

import logging
from typing import Any

from dataflow.models import FlowRun, PendingSplit, Split, SplitStatus
from source_support.api import Source

log = logging.getLogger("dataflow.services.runs")

#: The most failed splits whose errors a run's message lists.
MAX_ERRORS_NAMED = 20
#: The most unread splits whose inputs are looked for when a run fails (one request each
#: for an object store): the message says when there were more.
MAX_UNREAD_CHECKED = 200


def failed_run_message(*, run: FlowRun, source: Source) -> str:
    """The message of ``run``, failed because some of its splits failed: ``split failed:
    <error>`` for one, else how many failed with each error (up to ``MAX_ERRORS_NAMED``),
    then the inputs of unread splits (assigned or waiting) that are gone too.

    Other readers may still be failing splits while this is written: the run's splits are
    read in one query, so each is either failed (its error named) or unread (its input
    looked for), never neither. Waiting splits are read first: one assigned in between is
    seen twice, never missed, and its input named once."""
    waiting = PendingSplit.objects.filter(run=run).order_by("seq")
    waiting_total = waiting.count()
    checked = list(waiting.values_list("payload", flat=True)[:MAX_UNREAD_CHECKED])
    count, errors, unread, unread_total = 0, [], [], 0
    rows = Split.objects.filter(run=run).exclude(status=SplitStatus.FINISHED).order_by("pk")
    for status, error, payload in rows.values_list("status", "error", "payload").iterator():
        if status == SplitStatus.FAILED:
            count += 1
            if len(errors) < MAX_ERRORS_NAMED:
                errors.append(error)
        else:
            unread_total += 1
            if len(unread) < MAX_UNREAD_CHECKED:
                unread.append(payload)
    checked = (unread + checked)[:MAX_UNREAD_CHECKED]
    missing = _missing_inputs(run, source, checked)
    unchecked = unread_total + waiting_total - len(checked)
    if count == 1 and not missing:
        return f"split failed: {errors[0]}"
    more = f"; and {count - len(errors)} more" if count > len(errors) else ""
    parts = [f"{count} split{'s' if count != 1 else ''} failed: {'; '.join(errors)}{more}"]
    if missing:
        parts.append(f"not read yet and gone too: {', '.join(missing)}")
    if unchecked:
        parts.append(f"{unchecked} more unread splits were not checked")
    return "; ".join(parts)


def _missing_inputs(run: FlowRun, source: Source, payloads: list[Any]) -> list[str]:
    """The inputs of the unread splits' ``payloads`` that the source says are gone, each
    named once."""
    if not payloads:
        return []
    try:
        serializer = source.split_serializer
        missing = source.missing_inputs([serializer.deserialize(payload) for payload in payloads])
    except Exception:  # noqa: BLE001 - the failure itself is what the run must say
        log.warning("run %s: could not look for the inputs of its unread splits", run.pk, exc_info=True)
        return []
    return list(dict.fromkeys(missing))
