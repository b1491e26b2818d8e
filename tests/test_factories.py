"""The factories make what the services make: a flow of any trait is one a run may start."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.hashers import check_password

from dataflow.models import DeadLetter, FlowRun, FlowStatus, RunStatus
from dataflow.services.specs import flow_spec_of, flow_spec_validate
from tests.factories import (
    PASSWORD,
    AssignmentFactory,
    CheckpointFactory,
    DataFlowFactory,
    FlowRunFactory,
    LandedBatchFactory,
    MetricSampleFactory,
    UserFactory,
    WebhookDeliveryFactory,
)

pytestmark = pytest.mark.django_db

TRAITS = ["stream", "sequence", "running", "with_history", "with_dead_letters"]
#: Every trait a flow may have at once (its source is a stream or a sequence).
ALL_AT_ONCE = [trait for trait in TRAITS if trait != "sequence"]


@pytest.mark.parametrize("owner", ["operator", "user"])
@pytest.mark.parametrize(
    "traits", [[], *([trait] for trait in TRAITS), ALL_AT_ONCE], ids=lambda t: "+".join(t) or "plain"
)
def test_a_flow_of_any_trait_passes_the_validation_a_start_makes(dirs, settings, traits, owner):
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]  # a user's connection to the tests' Redis
    owner = UserFactory() if owner == "user" else None

    flow = DataFlowFactory(owner=owner, **dict.fromkeys(traits, True))

    # What flow_start checks again, as the flow's owner, before a run starts.
    values = flow_spec_validate(flow_spec_of(flow), owner=flow.owner)
    assert values["name"] == flow.name
    assert (values["source_type"] == "redis_streams") == ("stream" in traits)
    assert (values["source_type"] == "sequence") == ("sequence" in traits)


def test_a_flow_name_taken_already_is_refused_not_updated(dirs):
    DataFlowFactory(name="orders", parallelism=2)

    with pytest.raises(ValueError, match="exists already"):
        DataFlowFactory(name="orders", parallelism=3)


def test_the_traits_make_the_runs_they_name(dirs):
    flow = DataFlowFactory(running=True, with_history=True, with_dead_letters=True)

    runs = list(flow.runs.order_by("id"))
    assert flow.status == FlowStatus.RUNNING
    assert [run.status for run in runs] == [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.READING]
    assert runs[0].finished_at - runs[0].started_at == timedelta(minutes=14, seconds=17)
    assert runs[-1].finished_at is None
    assert set(DeadLetter.objects.filter(flow=flow).values_list("run", flat=True)) == {runs[-1].pk}
    assert all(run.spec["name"] == flow.name for run in runs)


def test_a_run_stores_the_spec_and_schema_a_start_would(dirs):
    run = FlowRunFactory(flow=DataFlowFactory(stream=True))

    assert run.spec == flow_spec_validate(flow_spec_of(run.flow))
    assert run.schema_ddl.startswith("`id` BIGINT")


def test_the_rows_a_run_leaves_belong_to_one_run(dirs):
    lease = AssignmentFactory()
    run = lease.split.run

    rows = [
        LandedBatchFactory(split=lease.split),
        MetricSampleFactory(run=run),
        CheckpointFactory(run=run),
        WebhookDeliveryFactory(run=run),
    ]

    assert FlowRun.objects.count() == 1
    assert all(row.run == run if hasattr(row, "run") else row.split.run == run for row in rows)


@pytest.mark.slow
def test_a_users_password_is_one_the_deployments_own_hashers_check(settings):
    """The tests' quick hasher (tests/conftest.py) writes hashes that a process without it,
    such as an e2e test's server, still checks."""
    user = UserFactory()
    settings.PASSWORD_HASHERS = [h for h in settings.PASSWORD_HASHERS if not h.startswith("tests.")]

    assert user.password.startswith("pbkdf2_sha256$1$")
    assert check_password(PASSWORD, user.password)
    assert not check_password("another-password", user.password)
