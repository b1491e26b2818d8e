"""The flow form's "Test connection" beside [source] and [sink]: the form's values as they
stand (unsaved included) go to ``connector_test``, the API's service, held to the flow
owner's rules; the named connection's page has its own button (``connection_test``)."""

from __future__ import annotations

import pytest
from django.test import Client

from dataflow.models import Connection
from tests.dataflow.admin.conftest import ADD_URL, browser_post, csv_flow_changes
from tests.factories import ConnectionFactory, DataFlowFactory, UserFactory
from tests.helpers import write_csv

pytestmark = pytest.mark.django_db

ADD_TEST = "/admin/dataflow/dataflow/test-connection/{}/"


def _change_test(flow, section: str) -> str:
    return f"/admin/dataflow/dataflow/{flow.pk}/test-connection/{section}/"


def _staff(codenames: tuple[str, ...]) -> Client:
    user = UserFactory(username="viewer", is_staff=True, perms=codenames)
    client = Client()
    client.force_login(user)
    return client


def test_the_add_form_tests_its_unsaved_source_and_sink(admin_client, dirs):
    page = admin_client.get(ADD_URL)
    data = browser_post(page, **csv_flow_changes(dirs))
    write_csv(dirs.data / "b.csv", range(3))

    source = admin_client.post(ADD_TEST.format("source"), data)
    sink = admin_client.post(ADD_TEST.format("sink"), data)

    assert 'id="adf-section-check"' in page.content.decode()
    assert f'data-source="{ADD_TEST.format("source")}"' in page.content.decode()
    assert source.status_code == 200
    assert "[source] files: OK" in source.content.decode()
    assert "2 files matched" in source.content.decode()
    assert "[sink] parquet: OK" in sink.content.decode()


def test_a_source_that_reaches_nothing_says_so(admin_client, dirs):
    page = admin_client.get(ADD_URL)
    missing = str(dirs.data / "none-here" / "*.csv")
    data = browser_post(page, **csv_flow_changes(dirs, source__files__path=missing))

    answer = admin_client.post(ADD_TEST.format("source"), data).content.decode()

    assert "[source] files: OK" in answer
    assert f"0 files matched {missing}, 0 bytes in all" in answer


def test_a_path_outside_the_allowed_roots_is_refused_naming_the_option(admin_client, dirs):
    page = admin_client.get(ADD_URL)
    data = browser_post(page, **csv_flow_changes(dirs, source__files__path="/etc/*.conf"))

    answer = admin_client.post(ADD_TEST.format("source"), data).content.decode()

    assert '<p class="errornote">source.path: ' in answer
    assert "files matched" not in answer


def test_a_bad_value_is_refused_naming_its_option(admin_client, dirs):
    page = admin_client.get(ADD_URL)
    data = browser_post(page, **csv_flow_changes(dirs, source__files__path=""))

    answer = admin_client.post(ADD_TEST.format("source"), data)

    assert answer.status_code == 200
    assert "source.path" in answer.content.decode()


def test_a_password_typed_in_a_url_is_never_in_the_answer(admin_client, dirs):
    page = admin_client.get(ADD_URL)
    data = browser_post(
        page,
        **csv_flow_changes(
            dirs,
            source_type="redis_streams",
            format_type="fields",
            source__redis_streams__url="redis://:s3cr3t-pw@127.0.0.1:1/0",
            source__redis_streams__streams="t-x:*",
        ),
    )

    answer = admin_client.post(ADD_TEST.format("source"), data).content.decode()

    assert "[source] redis_streams: failed" in answer, answer
    assert "s3cr3t-pw" not in answer


def test_staff_testing_alices_flow_cannot_use_bobs_connection(
    admin_client, alice, bob, rds, prefix, settings
):
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    rds.xadd(f"{prefix}a", {"n": 1})
    hers = ConnectionFactory(key_patterns=[f"{prefix}*"], users=[alice])
    his = ConnectionFactory(key_patterns=[f"{prefix}*"], users=[bob])
    flow = DataFlowFactory(name="alices", owner=alice, stream=True, streams=f"{prefix}*")
    page = admin_client.get(f"/admin/dataflow/dataflow/{flow.pk}/change/")

    def tested(connection: Connection) -> str:
        data = browser_post(page, source__redis_streams__connection=connection.name)
        return admin_client.post(_change_test(flow, "source"), data).content.decode()

    assert f"{prefix}a: 1 entries" in tested(hers)
    refused = tested(his)
    assert (
        f"source.connection: no connection named &#x27;{his.name}&#x27; is granted to the flow&#x27;s owner"
        in refused
    )
    assert "entries" not in refused


def test_view_only_staff_are_refused_with_a_message(dirs, admin_client):
    write_csv(dirs.data / "a.csv", range(3))
    flow = DataFlowFactory(name="viewed", source_path=str(dirs.data / "a.csv"))
    data = browser_post(admin_client.get(f"/admin/dataflow/dataflow/{flow.pk}/change/"))
    viewer = _staff(("view_dataflow",))

    on_add = viewer.post(ADD_TEST.format("source"), data)
    on_change = viewer.post(_change_test(flow, "source"), data)

    assert on_add.status_code == 403
    assert "Test connection refused: you may not add flows." in on_add.content.decode()
    assert on_change.status_code == 403
    assert (
        "Test connection refused: you may not change flow &#x27;viewed&#x27;." in on_change.content.decode()
    )
    assert "files matched" not in on_change.content.decode()


def test_the_connection_page_tests_the_connection(admin_client, rds, prefix):
    rds.xadd(f"{prefix}a", {"n": 1})
    connection = ConnectionFactory(key_patterns=[f"{prefix}*"])
    url = f"/admin/dataflow/connection/{connection.pk}/test-connection/"

    page = admin_client.get(f"/admin/dataflow/connection/{connection.pk}/change/")
    answer = admin_client.post(url)
    viewer = _staff(("view_connection",))
    refused = viewer.post(url)

    assert 'id="test-connection"' in page.content.decode()
    assert answer.status_code == 200
    assert f"{connection.name} (redis): OK" in answer.content.decode()
    assert f"{prefix}a: 1 entries" in answer.content.decode()
    assert refused.status_code == 403
    assert "Test connection refused" in refused.content.decode()
    assert (
        'id="test-connection"'
        not in viewer.get(f"/admin/dataflow/connection/{connection.pk}/change/").content.decode()
    )
