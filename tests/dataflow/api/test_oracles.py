"""What a refusal tells an ordinary user is only what they may know: a name taken by a flow
they cannot see is "unavailable", not "exists"."""

from __future__ import annotations

import pytest

from tests.dataflow.api.conftest import client_of
from tests.factories import DataFlowFactory, UserFactory
from tests.helpers import spec, write_csv

pytestmark = pytest.mark.django_db


def body(name: str, dirs) -> dict:
    write_csv(dirs.data / "a.csv", range(3))
    doc = spec(name, str(dirs.data / "a.csv"), str(dirs.out / f"{name}-alice"))
    return {**doc.pop("flow"), **doc}


def test_a_name_taken_by_a_flow_the_asker_cannot_see_is_only_unavailable(dirs):
    bob, alice = UserFactory(username="bob"), UserFactory(username="alice")
    DataFlowFactory(name="bob-glob", owner=bob)
    alices = client_of(alice)
    assert alices.get("/api/flows/bob-glob/").status_code == 404

    taken = alices.post("/api/flows/", body("bob-glob", dirs), format="json")

    assert taken.status_code == 409
    assert taken.json()["detail"] == "the name 'bob-glob' is unavailable; choose another"


def test_a_name_taken_by_the_askers_own_flow_says_it_exists(dirs):
    alice = UserFactory(username="alice")
    DataFlowFactory(name="mine", owner=alice)

    taken = client_of(alice).post("/api/flows/", body("mine", dirs), format="json")

    assert taken.status_code == 409
    assert "exists already" in taken.json()["detail"]
