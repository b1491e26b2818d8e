"""Limits of one user that have a setting of their own as default (a ``DATAFLOW_*``
setting) and that the user's ``UserQuota`` row may raise or lower; the quotas whose
defaults are ``DATAFLOW_USER_QUOTAS`` are read by ``services.quotas``."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from dataflow.models import UserQuota

#: Each limit's field on ``UserQuota`` and the setting that is its default.
LIMIT_SETTINGS = {
    "max_splits_per_flow": "DATAFLOW_MAX_SPLITS_PER_FLOW",
}


@dataclass(frozen=True)
class Limit:
    """A limit as it holds for one user: its value and where it comes from, in words for a
    message (``DATAFLOW_MAX_SPLITS_PER_FLOW`` or ``max_splits_per_flow of user bob``)."""

    value: int
    source: str


def user_limit(*, user_id: int | None, name: str) -> Limit:
    """Limit ``name`` for the user ``user_id`` (None: the operator's flows, which take the
    site's default)."""
    setting = LIMIT_SETTINGS[name]
    if user_id is not None:
        row = UserQuota.objects.filter(user_id=user_id).select_related("user").first()
        if row is not None and getattr(row, name) is not None:
            return Limit(getattr(row, name), f"{name} of user {row.user.get_username()}")
    return Limit(getattr(settings, setting), setting)


class SplitCeilingReached(Exception):
    """A run's source found more splits than its flow may have (``max_splits_per_flow``)."""
