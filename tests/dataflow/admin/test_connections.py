"""Connections in the admin: staff create and grant them, secrets are never shown, and a
secret left as shown keeps the stored one; the same refusals as the API."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from dataflow.models import Connection
from tests.dataflow.admin.conftest import browser_post
from tests.factories import ConnectionFactory, UserFactory

pytestmark = pytest.mark.django_db

ADD_URL = "/admin/dataflow/connection/add/"


def change_url(connection: Connection) -> str:
    return f"/admin/dataflow/connection/{connection.pk}/change/"


def test_staff_create_a_connection_granted_to_a_user(admin_client):
    alice = UserFactory(username="alice")
    page = admin_client.get(ADD_URL)

    response = admin_client.post(
        ADD_URL,
        browser_post(
            page,
            name="orders-redis",
            type="redis",
            url="redis://:hunter2@10.1.1.1:6379/0",
            key_patterns="orders:*, alice:*",
            users=[str(alice.pk)],
        ),
    )

    assert response.status_code == 302, response.context["adminform"].form.errors
    connection = Connection.objects.get(name="orders-redis")
    assert connection.key_patterns == ["orders:*", "alice:*"]
    assert list(connection.users.all()) == [alice]
    assert "hunter2" not in admin_client.get("/admin/dataflow/connection/").content.decode()


def test_the_change_form_never_shows_a_secret_and_keeps_it_when_left_as_shown(admin_client):
    connection = ConnectionFactory(
        url="redis://:hunter2@10.1.1.1:6379/0", password="pw-2!", key_patterns=["a:*"]
    )
    page = admin_client.get(change_url(connection))
    html = page.content.decode()
    assert "hunter2" not in html and "pw-2!" not in html
    assert "redis://:****@10.1.1.1:6379/0" in html

    response = admin_client.post(change_url(connection), browser_post(page, description="changed"))

    assert response.status_code == 302, response.context["adminform"].form.errors
    connection.refresh_from_db()
    assert (connection.url, connection.password, connection.description) == (
        "redis://:hunter2@10.1.1.1:6379/0",
        "pw-2!",
        "changed",
    )


def test_the_admin_refuses_a_connection_to_the_deployments_own_keys(admin_client):
    page = admin_client.get(ADD_URL)

    response = admin_client.post(
        ADD_URL,
        browser_post(page, name="own", type="redis", url=ConnectionFactory.url.function(), key_patterns="*"),
    )

    assert response.status_code == 200
    assert "deployment&#x27;s own keys" in str(response.context["adminform"].form.errors["key_patterns"])
    assert not Connection.objects.filter(name="own").exists()


def test_view_only_staff_cannot_change_or_add_connections(client):
    viewer = UserFactory(is_staff=True, perms=[])
    viewer.user_permissions.add(Permission.objects.get(codename="view_connection"))
    client.force_login(viewer)
    connection = ConnectionFactory(
        url="redis://:hunter2@10.1.1.1:6379/0", password="pw-2!", key_patterns=["a:*"]
    )

    assert client.get(ADD_URL).status_code == 403
    page = client.get(change_url(connection))
    html = page.content.decode()
    assert page.status_code == 200 and "redis://:****@10.1.1.1:6379/0" in html
    assert "hunter2" not in html and "pw-2!" not in html
    response = client.post(
        change_url(connection), {"name": "renamed", "type": "redis", "url": "redis://10.2.2.2/0"}
    )
    assert response.status_code == 403
    assert Connection.objects.get(pk=connection.pk).name == connection.name


@pytest.mark.slow
def test_the_flow_form_offers_a_connection_for_redis_sources_and_sinks(admin_client):
    form = admin_client.get("/admin/dataflow/dataflow/add/").context["adminform"].form

    assert "source__redis_streams__connection" in form.fields
    assert "sink__redis_stream__connection" in form.fields
