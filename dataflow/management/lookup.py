from django.core.management.base import CommandError

from dataflow.models import DataFlow


def flow_named(name: str) -> DataFlow:
    """The flow called ``name``, or a CommandError that says how to list flows."""
    flow = DataFlow.objects.filter(name=name).first()
    if flow is None:
        raise CommandError(f"no flow named {name!r} (see: manage.py flows)")
    return flow
