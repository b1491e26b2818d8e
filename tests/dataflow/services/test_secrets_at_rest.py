"""Secrets at rest (dataflow/encryption.py): what the database holds of a connection's URL
and password, a flow's secret options and webhook, and a run's copy of them, is encrypted
with the keys of DATAFLOW_SECRET_KEYS; a key rotation re-encrypts it; a deployment without
the key fails a run saying which secret and which setting, and writes nothing in clear."""

from __future__ import annotations

import logging

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.db import connection as db

from dataflow.encryption import SecretUndecryptable
from dataflow.models import Connection, DataFlow, DeliveryStatus, FlowRun, RunStatus, WebhookDelivery
from dataflow.services.connections import connection_save
from dataflow.services.flows import flow_start
from dataflow.services.notify import webhook_deliver
from dataflow.services.runs.tick import run_tick
from dataflow.services.secret_keys import secrets_rotate
from tests.dataflow.admin.conftest import browser_post
from tests.dataflow.api.conftest import client_of
from tests.dataflow.api.test_connections import connection_staff
from tests.factories import DataFlowFactory, FlowRunFactory, WebhookDeliveryFactory

pytestmark = pytest.mark.django_db

#: Each secret the rows below hold, as a user typed it: none may be found in the database.
CONNECTION_PASSWORD = "conn-pw-7f3a0c"
CONNECTION_URL_PASSWORD = "conn-url-pw-91c2e4"
FLOW_URL_PASSWORD = "flow-url-pw-5d0e77"
WEBHOOK_TOKEN = "hook-token-2b8c19"
AWS_SECRET = "aws-secret-key-60f1d2"
SECRETS = (CONNECTION_PASSWORD, CONNECTION_URL_PASSWORD, FLOW_URL_PASSWORD, WEBHOOK_TOKEN, AWS_SECRET)
WEBHOOK = f"https://hooks.example.com/flows?token={WEBHOOK_TOKEN}"


@pytest.fixture()
def old_key(settings) -> str:
    key = Fernet.generate_key().decode()
    settings.DATAFLOW_SECRET_KEYS = [key]
    return key


@pytest.fixture()
def stored(old_key, settings):
    """One of each: a connection with a password in its URL and one of its own, a flow that
    names it, a flow with a password in its source's URL and a webhook with a token, an
    object-store flow with an AWS secret key, a run of each flow and a webhook delivery."""
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    connection = connection_save(
        name="orders-redis",
        type="redis",
        url=f"redis://:{CONNECTION_URL_PASSWORD}@127.0.0.1:6399/0",
        password=CONNECTION_PASSWORD,
    )
    through = DataFlowFactory(
        name="through-connection",
        stream=True,
        source={"type": "redis_streams", "streams": "orders:*", "connection": connection.name},
    )
    direct = DataFlowFactory(
        name="direct",
        stream=True,
        stream_url=f"redis://:{FLOW_URL_PASSWORD}@127.0.0.1:6399/0",
        notify={"webhook": WEBHOOK, "on": ["failed"]},
    )
    objects = DataFlowFactory(
        name="objects",
        source={
            "type": "s3",
            "bucket": "events",
            "endpoint_url": "http://127.0.0.1:4571",
            "access_key_id": "AKIDEXAMPLE",
            "secret_access_key": AWS_SECRET,
        },
    )
    runs = [FlowRunFactory(flow=flow) for flow in (through, direct, objects)]
    delivery = WebhookDeliveryFactory(run=runs[1], url=WEBHOOK)
    return {"connection": connection, "flows": (through, direct, objects), "runs": runs, "delivery": delivery}


def database_text() -> str:
    """Every row of every table of the database, as PostgreSQL prints it (raw SQL: what a
    dump or a replica gives)."""
    rows: list[str] = []
    with db.cursor() as cursor:
        cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        for (table,) in cursor.fetchall():
            cursor.execute(f'SELECT row_to_json(t)::text FROM "{table}" t')
            rows += [row for (row,) in cursor.fetchall()]
    return "\n".join(rows)


def assert_no_secret_in(text: str) -> None:
    found = [secret for secret in SECRETS if secret in text]
    assert not found, f"in clear: {found}"


def secrets_read_back() -> dict[str, str]:
    """Each secret as the ORM reads it back (decrypted)."""
    connection = Connection.objects.get(name="orders-redis")
    direct = DataFlow.objects.get(name="direct")
    objects = DataFlow.objects.get(name="objects")
    return {
        "connection.url": connection.url,
        "connection.password": connection.password,
        "direct.url": direct.source_config["url"],
        "direct.webhook": direct.notify["webhook"],
        "direct.run.url": direct.runs.get().spec["source_config"]["url"],
        "direct.run.webhook": direct.runs.get().spec["notify"]["webhook"],
        "objects.secret": objects.source_config["secret_access_key"],
        "objects.run.secret": objects.runs.get().spec["source_config"]["secret_access_key"],
        "delivery.url": WebhookDelivery.objects.get().url,
    }


CLEAR = {
    "connection.url": f"redis://:{CONNECTION_URL_PASSWORD}@127.0.0.1:6399/0",
    "connection.password": CONNECTION_PASSWORD,
    "direct.url": f"redis://:{FLOW_URL_PASSWORD}@127.0.0.1:6399/0",
    "direct.webhook": WEBHOOK,
    "direct.run.url": f"redis://:{FLOW_URL_PASSWORD}@127.0.0.1:6399/0",
    "direct.run.webhook": WEBHOOK,
    "objects.secret": AWS_SECRET,
    "objects.run.secret": AWS_SECRET,
    "delivery.url": WEBHOOK,
}


def test_the_database_holds_no_secret_in_clear_and_the_app_reads_them_back(stored):
    text = database_text()

    assert_no_secret_in(text)
    assert text.count("fernet:gAAAAA") >= 9  # each secret is there, sealed
    assert "127.0.0.1:4571" in text  # what is not a secret stays readable (and queryable)
    assert secrets_read_back() == CLEAR


def test_the_old_key_decrypts_until_the_rotation_after_which_only_the_new_one_is_needed(
    stored, old_key, settings
):
    new_key = Fernet.generate_key().decode()
    before = database_text()
    settings.DATAFLOW_SECRET_KEYS = [new_key, old_key]
    assert secrets_read_back() == CLEAR  # the new key first: the old one still decrypts

    report = secrets_rotate()

    assert report.secrets == {"connections": 2, "flows": 4, "runs": 4, "webhook_deliveries": 1}
    assert report.rows == {"connections": 1, "flows": 2, "runs": 2, "webhook_deliveries": 1}
    after = database_text()
    assert_no_secret_in(after)
    assert after != before
    settings.DATAFLOW_SECRET_KEYS = [new_key]  # the old key gone
    assert secrets_read_back() == CLEAR
    settings.DATAFLOW_SECRET_KEYS = [old_key]  # and it no longer decrypts any of them
    assert all(value != CLEAR[name] for name, value in secrets_read_back().items())


def test_flowctl_rotate_secrets_reports_what_it_re_encrypted(stored, old_key, settings, capsys):
    settings.DATAFLOW_SECRET_KEYS = [Fernet.generate_key().decode(), old_key]

    call_command("flowctl", "rotate-secrets")

    out = capsys.readouterr().out
    assert "re-encrypted 11 secrets with the first key of DATAFLOW_SECRET_KEYS" in out
    assert "connections: 2 in 1 rows" in out and "webhook deliveries: 1 in 1 rows" in out


def test_a_rotation_that_meets_a_secret_no_key_decrypts_changes_nothing(stored, settings):
    before = database_text()
    settings.DATAFLOW_SECRET_KEYS = [Fernet.generate_key().decode()]  # the old key lost

    with pytest.raises(SecretUndecryptable) as refused:
        secrets_rotate()

    assert "connections 'orders-redis' (url, password)" in str(refused.value)
    assert "DATAFLOW_SECRET_KEYS" in str(refused.value) and "nothing was changed" in str(refused.value)
    assert database_text() == before


def test_a_start_without_the_key_fails_a_run_naming_the_flow_the_secret_and_the_setting(
    stored, settings, caplog
):
    settings.DATAFLOW_SECRET_KEYS = [Fernet.generate_key().decode()]
    direct = DataFlow.objects.get(name="direct")  # read by a process without the key

    with caplog.at_level(logging.DEBUG), pytest.raises(SecretUndecryptable) as refused:
        flow_start(flow=direct)

    run = direct.runs.order_by("-pk").first()
    assert run is not None and run.status == RunStatus.FAILED
    assert run.message == f"the run could not start: {refused.value}"
    assert (
        "flow 'direct': notify.webhook, source.url cannot be decrypted with any key of DATAFLOW_SECRET_KEYS"
        in (run.message)
    )
    assert_no_secret_in(database_text() + caplog.text + run.message)


def test_a_start_over_a_connection_no_key_decrypts_names_the_connection(stored, settings):
    settings.DATAFLOW_SECRET_KEYS = [Fernet.generate_key().decode()]
    through = DataFlow.objects.get(name="through-connection")

    with pytest.raises(SecretUndecryptable) as refused:
        flow_start(flow=through)

    assert refused.value.field == "source.connection"
    assert "connection 'orders-redis': password, url cannot be decrypted" in refused.value.reason
    assert "DATAFLOW_SECRET_KEYS" in refused.value.reason
    assert through.runs.order_by("-pk").first().status == RunStatus.FAILED
    assert_no_secret_in(database_text())


def test_a_running_run_whose_key_is_gone_fails_at_its_next_tick(stored, settings, caplog):
    direct = DataFlow.objects.get(name="direct")
    run = FlowRunFactory(flow=direct, running=True)
    settings.DATAFLOW_SECRET_KEYS = [Fernet.generate_key().decode()]

    with caplog.at_level(logging.DEBUG):
        run_tick(run_id=run.pk)

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.message.startswith(
        f"run {run.pk} of flow 'direct': notify.webhook, source.url cannot be decrypted with any key "
        "of DATAFLOW_SECRET_KEYS"
    )
    assert_no_secret_in(database_text() + caplog.text)


def test_an_edit_without_the_key_keeps_the_stored_secret_sealed_as_it_was(stored, settings):
    """A flow saved again by a process without the key (a rename of its description)
    writes its secrets back exactly as stored: nothing is lost, nothing is in clear."""
    before = database_text()
    settings.DATAFLOW_SECRET_KEYS = [Fernet.generate_key().decode()]
    flow = DataFlow.objects.get(name="direct")

    flow.description = "edited without the key"
    flow.save()

    after = database_text()
    assert_no_secret_in(after)
    sealed_url = before.split('"url": "', 1)[1].split('"', 1)[0]
    assert sealed_url in after


def test_rows_of_a_run_keep_their_secrets_sealed_when_updated(stored):
    run = FlowRun.objects.get(flow__name="direct")

    run.spec = {**run.spec, "parallelism": 2}  # as a rescale writes it
    run.save(update_fields=["spec"])

    assert_no_secret_in(database_text())
    assert FlowRun.objects.get(pk=run.pk).spec["source_config"]["url"] == CLEAR["direct.url"]


def test_an_api_put_without_the_secrets_keeps_the_stored_ones_sealed(stored):
    staff = client_of(connection_staff())
    shown = staff.get("/api/connections/orders-redis/").json()
    flow = staff.get("/api/flows/direct/").json()

    kept = staff.put(
        "/api/connections/orders-redis/",
        {k: shown[k] for k in ("name", "type", "url", "key_patterns")} | {"description": "renamed"},
        format="json",
    )
    put = staff.put("/api/flows/direct/", {**flow, "batch_size": 500}, format="json")

    assert (kept.status_code, put.status_code) == (200, 200), (kept.content, put.content)
    assert_no_secret_in(str(shown) + str(flow) + kept.content.decode() + put.content.decode())
    assert_no_secret_in(database_text())
    assert secrets_read_back() == CLEAR
    assert DataFlow.objects.get(name="direct").batch_size == 500


def test_an_admin_change_without_the_secrets_keeps_the_stored_ones_sealed(stored, admin_client):
    url = f"/admin/dataflow/connection/{stored['connection'].pk}/change/"
    page = admin_client.get(url)

    response = admin_client.post(url, browser_post(page, description="changed"))

    assert response.status_code == 302, response.context["adminform"].form.errors
    assert_no_secret_in(page.content.decode() + database_text())
    assert secrets_read_back() == CLEAR


def test_an_api_put_without_the_key_is_refused_naming_the_secret_not_its_option(stored, settings):
    settings.DATAFLOW_SECRET_KEYS = [Fernet.generate_key().decode()]
    staff = client_of(connection_staff())
    flow = staff.get("/api/flows/direct/").json()

    put = staff.put("/api/flows/direct/", {**flow, "batch_size": 500}, format="json")

    assert put.status_code == 400
    assert "cannot be decrypted with any key of DATAFLOW_SECRET_KEYS" in put.json()["notify.webhook"][0]
    assert_no_secret_in(str(flow) + put.content.decode() + database_text())
    assert DataFlow.objects.get(name="direct").batch_size != 500


@pytest.mark.slow
def test_an_admin_change_without_the_key_is_refused_naming_the_secret(stored, settings, admin_client):
    settings.DATAFLOW_SECRET_KEYS = [Fernet.generate_key().decode()]
    url = f"/admin/dataflow/dataflow/{DataFlow.objects.get(name='direct').pk}/change/"
    page = admin_client.get(url)

    response = admin_client.post(url, browser_post(page, description="changed"))

    assert response.status_code == 200  # the form again, with the refusal
    errors = str(response.context["adminform"].form.errors)
    assert "cannot be decrypted with any key of DATAFLOW_SECRET_KEYS" in errors
    assert_no_secret_in(page.content.decode() + response.content.decode() + database_text())
    assert DataFlow.objects.get(name="direct").description == ""


def test_a_webhook_no_key_decrypts_is_not_called_and_its_delivery_says_why(stored, settings, caplog):
    settings.DATAFLOW_SECRET_KEYS = [Fernet.generate_key().decode()]

    with caplog.at_level(logging.DEBUG):
        assert webhook_deliver(delivery_id=stored["delivery"].pk) is None  # no retry: it cannot help

    delivery = WebhookDelivery.objects.get(pk=stored["delivery"].pk)
    assert (delivery.status, delivery.response_status) == (DeliveryStatus.FAILED, None)
    assert delivery.last_error.startswith(
        "webhook of flow 'direct': url cannot be decrypted with any key of DATAFLOW_SECRET_KEYS"
    )
    assert_no_secret_in(database_text() + caplog.text)
