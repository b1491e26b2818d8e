"""The s3 source through the API and the admin: listed with its TOML fields, saved with
its secrets masked, and held to a user's named aws connection (alice's keys are not
bob's). Nothing here connects to S3."""

from __future__ import annotations

import pytest

from dataflow.models import DataFlow
from tests.dataflow.admin.conftest import ADD_URL, add_flow  # noqa: F401 - a fixture
from tests.dataflow.api.conftest import _api_settings, client_of  # noqa: F401 - an autouse fixture
from tests.factories import ALL_FLOW_PERMS, ConnectionFactory, UserFactory

pytestmark = pytest.mark.django_db

ISSUE_FIELDS = {
    "endpoint_url",
    "bucket",
    "prefix",
    "pattern",
    "region",
    "access_key_id",
    "secret_access_key",
    "watch",
    "split_size_mb",
    "connection",
}
#: Fields added to the issue's, as the files source has them.
ADDED_FIELDS = {"allow_empty"}


def s3_flow(name: str, **source) -> dict:
    return {
        "name": name,
        "source": {"type": "s3", **source},
        "format": {"type": "csv", "schema": "id BIGINT, amount DOUBLE"},
        "transform": {"sql": "SELECT id, amount FROM source"},
        "sink": {"type": "parquet", "path": "out/s3-api"},
    }


@pytest.fixture()
def loopback_allowed(settings):
    """The connections below name a loopback endpoint: the deployment allows it on purpose."""
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]


def lake(name: str, patterns: list[str], **grants):
    return ConnectionFactory(
        name=name, type="aws", url="http://AKIDALICE:s3cret@127.0.0.1:9000", key_patterns=patterns, **grants
    )


def refused(response, field: str) -> str:
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    return response.json()[field][0]


def test_the_catalog_lists_the_s3_source_with_the_issues_fields():
    staff = UserFactory(is_staff=True, perms=ALL_FLOW_PERMS)
    catalog = client_of(staff).get("/api/connectors/").json()

    source = next(s for s in catalog["sources"] if s["type"] == "s3")
    assert set(source["schema"]["properties"]) == ISSUE_FIELDS | ADDED_FIELDS | {"type"}
    assert source["schema"]["required"] == ["type", "bucket"]


def test_staff_save_an_s3_flow_and_see_its_secrets_masked(tmp_path):
    staff = UserFactory(is_staff=True, perms=ALL_FLOW_PERMS)
    body = s3_flow(
        "events",
        endpoint_url="http://127.0.0.1:9000",
        bucket="events",
        prefix="2026/11/",
        pattern="**/*.csv.gz",
        access_key_id="AKIDSTAFF",
        secret_access_key="s3cret-key",
    )

    created = client_of(staff).post("/api/flows/", body, format="json")

    assert created.status_code == 201, created.content
    assert "s3cret-key" not in created.content.decode() and "AKIDSTAFF" not in created.content.decode()
    assert DataFlow.objects.get(name="events").source_config["secret_access_key"] == "s3cret-key"


@pytest.mark.slow
def test_the_admin_offers_the_s3_source_and_saves_a_flow_through_it(admin_client, add_flow):  # noqa: F811
    page = admin_client.get(ADD_URL).content.decode()
    assert 'class="module aligned adf-options adf-source-options adf-type-s3"' in page
    assert '<label for="id_source__s3__bucket">bucket:</label>' in page

    response = add_flow(
        source_type="s3",
        source__s3__endpoint_url="http://127.0.0.1:9000",
        source__s3__bucket="events",
        source__s3__pattern="*.csv",
    )

    assert response.status_code == 302, response.context["adminform"].form.errors
    flow = DataFlow.objects.get(name="admin-flow")
    assert (flow.source_type, flow.source_config["bucket"]) == ("s3", "events")


def test_alice_needs_a_connection_and_may_not_give_an_endpoint(alice):
    api = client_of(alice)
    no_connection = api.post("/api/flows/", s3_flow("x", bucket="events"), format="json")
    typed = api.post(
        "/api/flows/", s3_flow("x", bucket="events", endpoint_url="http://127.0.0.1:9000"), format="json"
    )

    assert "is required" in refused(no_connection, "source.connection")
    assert "only staff may give an address" in refused(typed, "source.endpoint_url")


@pytest.mark.slow
def test_alice_reads_her_prefix_through_her_connection(alice, loopback_allowed):
    lake("alice-lake", ["alice-data/in/*"], users=[alice])

    response = client_of(alice).post(
        "/api/flows/",
        s3_flow("mine", connection="alice-lake", bucket="alice-data", prefix="in/2026/"),
        format="json",
    )

    assert response.status_code == 201, response.content
    assert "s3cret" not in response.content.decode()


@pytest.mark.parametrize(
    ("bucket", "prefix", "field"),
    [
        ("bob-data", "in/", "source.prefix"),
        ("alice-data", "", "source.bucket"),
        ("alice-data", "out/", "source.prefix"),
    ],
)
def test_alice_cannot_reach_keys_outside_her_connections_patterns(
    alice, loopback_allowed, bucket, prefix, field
):
    lake("alice-lake", ["alice-data/in/*"], users=[alice])

    response = client_of(alice).post(
        "/api/flows/", s3_flow("steal", connection="alice-lake", bucket=bucket, prefix=prefix), format="json"
    )

    assert "outside what connection 'alice-lake' allows (alice-data/in/*)" in refused(response, field)


def test_alice_cannot_use_bobs_connection(alice, bob, loopback_allowed):
    lake("bob-lake", ["bob-data/*"], users=[bob])

    response = client_of(alice).post(
        "/api/flows/", s3_flow("steal", connection="bob-lake", bucket="bob-data"), format="json"
    )

    assert "no connection named 'bob-lake'" in refused(response, "source.connection")
