"""Users and flows for the API tests (factory-boy)."""

from __future__ import annotations

import factory
from django.contrib.auth.models import Permission, User
from rest_framework.authtoken.models import Token

from dataflow.models import Connection, DataFlow, DeadLetter, FlowRun, RunStatus
from dataflow.redis_client import redis_url
from dataflow.services.connections import connection_save
from dataflow.services.flows import flow_apply
from tests.helpers import spec

#: The model permissions of a user who may do anything to flows through the API.
ALL_FLOW_PERMS = ("add_dataflow", "change_dataflow", "delete_dataflow")


class UserFactory(factory.django.DjangoModelFactory):
    """A user with the model permissions named in ``perms`` (all three by default)."""

    class Meta:
        model = User
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.PostGenerationMethodCall("set_password", "secret-pw")

    @factory.post_generation
    def perms(self, create, extracted):
        codenames = ALL_FLOW_PERMS if extracted is None else extracted
        self.user_permissions.set(
            Permission.objects.filter(codename__in=codenames, content_type__app_label="dataflow")
        )
        self.save()


class TokenFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Token

    user = factory.SubFactory(UserFactory)


class FlowFactory(factory.django.DjangoModelFactory):
    """A valid flow made through ``flow_apply``: a CSV files source at ``source_path``, a
    Parquet sink at ``sink_path`` (both under the ``dirs`` fixture's roots)."""

    class Meta:
        model = DataFlow

    name = factory.Sequence(lambda n: f"flow-{n}")
    owner = factory.SubFactory(UserFactory)
    source_path = ""
    sink_path = ""

    @classmethod
    def _create(cls, model_class, *, name, owner, source_path, sink_path, **flow_fields):
        flow, _ = flow_apply(spec=spec(name, source_path, sink_path, **flow_fields), owner=owner)
        return flow


class RunFactory(factory.django.DjangoModelFactory):
    """A finished run (no splits, no Redis keys): for listing, not for running."""

    class Meta:
        model = FlowRun

    status = RunStatus.SUCCEEDED
    records_read = 10
    rows_written = 10


class DeadLetterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = DeadLetter

    flow = factory.LazyAttribute(lambda o: o.run.flow)
    split_id = "data/orders.csv"
    position = factory.Sequence(lambda n: n * 100)
    offset = factory.LazyAttribute(lambda o: str(o.position))
    line = factory.Sequence(lambda n: n + 2)
    raw = "1,oops,not-a-number"
    error = "temperature: could not parse 'not-a-number' as double"


class ConnectionFactory(factory.django.DjangoModelFactory):
    """A redis connection made through ``connection_save``, to the tests' Redis by default
    (the deployment's own: its ``key_patterns`` must keep off the deployment's keys),
    granted to ``users`` and ``groups``."""

    class Meta:
        model = Connection

    name = factory.Sequence(lambda n: f"redis-{n}")
    type = "redis"
    url = factory.LazyFunction(redis_url)
    key_patterns = factory.LazyFunction(lambda: ["t-*"])
    users = factory.LazyFunction(list)
    groups = factory.LazyFunction(list)

    @classmethod
    def _create(cls, model_class, **fields):
        return connection_save(**fields)
