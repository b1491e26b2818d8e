"""What a user may use: each limit has a site default (a ``DATAFLOW_*`` setting) that a
``UserLimits`` row may raise or lower for one user. Per-user quotas add their limit here
(a field on ``UserLimits`` and its setting in ``LIMIT_SETTINGS``) and read it with
``user_limit``."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from dataflow.models import UserLimits

#: Each limit's field on ``UserLimits`` and the setting that is its default.
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
        row = UserLimits.objects.filter(user_id=user_id).select_related("user").first()
        if row is not None and getattr(row, name) is not None:
            return Limit(getattr(row, name), f"{name} of user {row.user.get_username()}")
    return Limit(getattr(settings, setting), setting)


class SplitCeilingReached(Exception):
    """A run's source found more splits than its flow may have (``max_splits_per_flow``)."""
