"""What a user may see: staff see every flow and connection; any other user the flows they
own, with those flows' runs and dead letters, and the connections granted to them."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from dataflow.models import Connection, DataFlow, DeadLetter, FlowRun


def flows_visible(*, user) -> QuerySet[DataFlow]:
    """The flows ``user`` may see and steer, with their owners: every flow for staff, only
    the ones they own otherwise, none for an anonymous user."""
    flows = DataFlow.objects.select_related("owner")
    if getattr(user, "is_staff", False):
        return flows
    if not getattr(user, "is_authenticated", False):
        return flows.none()
    return flows.filter(owner=user)


def runs_visible(*, user) -> QuerySet[FlowRun]:
    """The runs of the flows ``user`` may see."""
    return FlowRun.objects.filter(flow__in=flows_visible(user=user)).select_related("flow")


def dead_letters_visible(*, user) -> QuerySet[DeadLetter]:
    """The dead letters of the flows ``user`` may see."""
    return DeadLetter.objects.filter(flow__in=flows_visible(user=user)).select_related("flow")


def connections_visible(*, user) -> QuerySet[Connection]:
    """The connections ``user`` may see: every one for staff, else those granted to the
    user directly or through one of the user's groups."""
    connections = Connection.objects.all()
    if user.is_staff or user.is_superuser:
        return connections
    return connections.filter(Q(users=user) | Q(groups__user=user)).distinct()
