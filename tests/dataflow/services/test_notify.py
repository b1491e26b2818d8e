"""[notify]: a run's end calls the flow's webhook once, retried with backoff, never waited for."""

from __future__ import annotations

import base64
import copy
import json
import socket
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from dataflow.models import DeliveryStatus, FlowRun, RunStatus, WebhookDelivery
from dataflow.services.flows import flow_apply
from dataflow.services.notify import webhook_deliveries_resume, webhook_url_masked
from dataflow.services.runs.finish import run_finish
from dataflow.services.specs import flow_spec_of
from source_support import addresses
from source_support.errors import ConfigError
from tests.factories import FlowRunFactory, WebhookDeliveryFactory
from tests.helpers import logs_of, spec, wait_until, write_csv
from tests.server_process import free_port


@dataclass
class Call:
    headers: dict[str, str]
    body: dict


@dataclass
class Receiver:
    """A webhook receiver on 127.0.0.1: answers each call with the next of ``answers``
    (the last one again once they run out) and keeps what it was sent."""

    answers: list[int]
    calls: list[Call] = field(default_factory=list)
    #: Cleared: each call waits for it to be set before answering.
    go_on: threading.Event = field(default_factory=threading.Event)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/flows"

    def answer(self, call: Call) -> int:
        self.calls.append(call)
        self.go_on.wait(timeout=30)
        return self.answers[min(len(self.calls), len(self.answers)) - 1]


@pytest.fixture()
def receiver(settings):
    """The receiver, on loopback: an internal address the deployment allows on purpose."""
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    state = Receiver(answers=[200])
    state.go_on.set()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status = state.answer(Call(dict(self.headers), body))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):  # the test asserts on calls, not on a server log
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.port = server.server_port
    yield state
    state.go_on.set()
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture()
def quick_retries(settings):
    settings.DATAFLOW_WEBHOOK_BACKOFF_SECONDS = 0.05
    settings.DATAFLOW_WEBHOOK_ATTEMPTS = 3


@pytest.fixture()
def notify_log(caplog):
    """What the notify service logs."""
    with logs_of(caplog, "dataflow.services.notify"):
        yield caplog


def _flow_spec(dirs, notify: dict | None) -> dict:
    write_csv(dirs.data / "a.csv", range(10))
    doc = spec("hooked", str(dirs.data / "*.csv"), str(dirs.out / "sink"))
    if notify is not None:
        doc["notify"] = notify
    return doc


def _delivery_over(run: FlowRun) -> WebhookDelivery:
    def over() -> bool:
        return WebhookDelivery.objects.filter(run=run).exclude(status=DeliveryStatus.PENDING).exists()

    wait_until(over, 30, lambda: f"deliveries still pending: {list(WebhookDelivery.objects.values())}")
    return WebhookDelivery.objects.get(run=run)


@pytest.mark.slow
def test_a_failed_run_is_posted_again_after_a_500_and_then_delivered(worker, dirs, receiver, quick_retries):
    receiver.answers = [500, 200]
    run = FlowRunFactory(running=True, flow__notify={"webhook": receiver.url})

    run_finish(run=run, status=RunStatus.FAILED, message="split failed: bad record")

    delivery = _delivery_over(run)
    assert (delivery.status, delivery.attempts, delivery.response_status, delivery.event) == (
        DeliveryStatus.DELIVERED,
        2,
        200,
        "run.failed",
    )
    assert delivery.delivered_at is not None and delivery.last_error == ""
    assert len(receiver.calls) == 2
    call = receiver.calls[-1]
    assert call.headers["User-Agent"] == "activedataflow"
    assert call.headers["X-Dataflow-Event"] == "run.failed"
    assert call.headers["Content-Type"] == "application/json"
    run.refresh_from_db()
    assert call.body == {
        "flow": run.flow.name,
        "run": run.pk,
        "event": "run.failed",
        "status": "failed",
        "trigger": "manual",
        "message": "split failed: bad record",
        "records_read": 0,
        "rows_written": None,
        "errors": 0,
        "started_at": run.started_at.isoformat(),
        "finished_at": run.finished_at.isoformat(),
    }


@pytest.mark.slow
def test_a_404_fails_the_delivery_after_one_attempt(worker, dirs, receiver, quick_retries):
    receiver.answers = [404]
    run = FlowRunFactory(running=True, flow__notify={"webhook": receiver.url})

    run_finish(run=run, status=RunStatus.FAILED, message="boom")

    delivery = _delivery_over(run)
    assert (delivery.status, delivery.attempts, delivery.response_status) == (DeliveryStatus.FAILED, 1, 404)
    assert delivery.last_error == "HTTP 404 Not Found"
    assert len(receiver.calls) == 1


@pytest.mark.slow
def test_a_host_no_longer_allowed_is_not_called(worker, dirs, receiver, quick_retries, settings):
    receiver.answers = [200]
    run = FlowRunFactory(running=True, flow__notify={"webhook": receiver.url})
    settings.DATAFLOW_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.com"]  # changed after the flow was saved

    run_finish(run=run, status=RunStatus.FAILED, message="boom")

    delivery = _delivery_over(run)
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.FAILED, 1)
    assert "not in DATAFLOW_WEBHOOK_ALLOWED_HOSTS" in delivery.last_error
    assert receiver.calls == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("hooks.example.com", True),
        ("a.corp.example", True),
        ("127.0.0.1", False),
        ("example.com.evil", False),
    ],
)
def test_webhook_hosts_can_be_limited_to_a_list(dirs, settings, host, allowed):
    settings.DATAFLOW_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.com", "*.corp.example"]
    doc = _flow_spec(dirs, {"webhook": f"https://{host}/flows"})

    if allowed:
        flow_apply(spec=doc)
    else:
        with pytest.raises(ConfigError) as refused:
            flow_apply(spec=doc)
        assert refused.value.field == "notify.webhook"
        assert f"{host} is not a host webhooks may call" in refused.value.reason


@pytest.mark.slow
def test_a_delivery_whose_task_was_lost_is_sent_again_by_the_sweep(worker, dirs, receiver, quick_retries):
    receiver.answers = [200]
    run = FlowRunFactory(running=True, flow__notify={"webhook": receiver.url})
    # As if the broker was down when the run ended: the delivery is recorded, no task runs.
    lost = WebhookDeliveryFactory(run=run, url=receiver.url)
    WebhookDelivery.objects.filter(pk=lost.pk).update(created_at=timezone.now() - timedelta(hours=1))
    WebhookDeliveryFactory(run__flow=run.flow, url=receiver.url)  # of a run that failed just now

    assert webhook_deliveries_resume() == 1

    delivery = _delivery_over(run)
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.DELIVERED, 1)
    assert len(receiver.calls) == 1


@pytest.mark.slow
def test_a_receiver_that_refuses_connections_is_tried_every_attempt_then_given_up(
    worker, dirs, quick_retries, settings
):
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    nothing_listens = free_port()
    run = FlowRunFactory(
        running=True, flow__notify={"webhook": f"http://127.0.0.1:{nothing_listens}/hooks/flows"}
    )

    run_finish(run=run, status=RunStatus.FAILED, message="boom")

    delivery = _delivery_over(run)
    assert (delivery.status, delivery.attempts, delivery.response_status) == (DeliveryStatus.FAILED, 3, None)
    assert "Connection refused" in delivery.last_error


@pytest.mark.slow
def test_ending_a_run_again_never_calls_the_webhook_twice(worker, dirs, receiver, quick_retries):
    run = FlowRunFactory(running=True, flow__notify={"webhook": receiver.url})
    run_finish(run=run, status=RunStatus.FAILED, message="boom")
    _delivery_over(run)
    # Active again (as a restart of its failed splits makes it), then failed again.
    FlowRun.objects.filter(pk=run.pk).update(status=RunStatus.READING, finished_at=None)

    ended_again = run_finish(run=run, status=RunStatus.FAILED, message="boom again")
    ended_once_more = run_finish(run=run, status=RunStatus.FAILED, message="and again")

    assert (ended_again, ended_once_more) == (True, False)
    assert WebhookDelivery.objects.filter(run=run).count() == 1
    assert len(receiver.calls) == 1


@pytest.mark.slow
def test_the_run_ends_without_waiting_for_the_receiver(worker, dirs, receiver, quick_retries):
    receiver.go_on.clear()  # the receiver takes the call and answers only when told
    run = FlowRunFactory(running=True, flow__notify={"webhook": receiver.url})

    run_finish(run=run, status=RunStatus.FAILED, message="boom")

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    wait_until(lambda: receiver.calls, 30, lambda: "the webhook was never called")
    assert WebhookDelivery.objects.get(run=run).status == DeliveryStatus.PENDING
    receiver.go_on.set()
    assert _delivery_over(run).status == DeliveryStatus.DELIVERED


@pytest.mark.slow
def test_credentials_in_the_url_go_as_basic_auth_and_never_into_the_log(
    worker, dirs, receiver, quick_retries, notify_log
):
    receiver.answers = [403]
    url = receiver.url.replace("http://", "http://hook%40user:s3cret@") + "?token=t0ps3cret"
    run = FlowRunFactory(running=True, flow__notify={"webhook": url, "on": ["stopped"]})

    run_finish(run=run, status=RunStatus.STOPPED, message="stopped by request")

    assert _delivery_over(run).status == DeliveryStatus.FAILED
    sent = receiver.calls[0].headers["Authorization"]
    assert base64.b64decode(sent.removeprefix("Basic ")) == b"hook@user:s3cret"
    assert "run.stopped of run" in notify_log.text
    assert "s3cret" not in notify_log.text
    assert f"http://***@127.0.0.1:{receiver.port}/hooks/flows?***" in notify_log.text


@pytest.mark.django_db
def test_an_outcome_not_listed_in_on_calls_nothing(dirs, receiver):
    run = FlowRunFactory(running=True, flow__notify={"webhook": receiver.url, "on": ["failed"]})

    run_finish(run=run, status=RunStatus.SUCCEEDED, rows_written=10)

    assert not WebhookDelivery.objects.exists()


@pytest.mark.django_db
def test_a_flow_without_notify_records_no_delivery(dirs):
    run = FlowRunFactory(running=True)

    run_finish(run=run, status=RunStatus.FAILED, message="boom")

    assert not WebhookDelivery.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("notify", "field", "reason"),
    [
        ({"webhook": "ftp://example.com/hook"}, "notify.webhook", "must be an http or https URL"),
        ({"webhook": "file:///etc/passwd"}, "notify.webhook", "must be an http or https URL"),
        ({"webhook": "example.com/hook"}, "notify.webhook", "must be an http or https URL"),
        ({"webhook": "https:///hook"}, "notify.webhook", "must name a host"),
        ({"webhook": "https://example.com:99999/hook"}, "notify.webhook", "out of range"),
        ({"webhook": "https://example.com/a b"}, "notify.webhook", "without spaces"),
        ({"on": ["failed"]}, "notify.webhook", "is required"),
        ({"webhook": "https://example.com/hook", "on": ["finished"]}, "notify.on", "'finished' is not one"),
        ({"webhook": "https://example.com/hook", "on": []}, "notify.on", "must list run outcomes"),
        ({"webhook": "https://example.com/hook", "on": "failed"}, "notify.on", "must be a list"),
        ({"webhook": "https://example.com/hook", "secret": "x"}, "notify.secret", "is not a field of notify"),
    ],
)
def test_a_bad_notify_is_refused_naming_the_field(dirs, notify, field, reason):
    with pytest.raises(ConfigError) as refused:
        flow_apply(spec=_flow_spec(dirs, notify))

    assert refused.value.field == field
    assert reason in refused.value.reason


@pytest.mark.django_db
def test_notify_reads_back_with_its_default_outcomes(dirs):
    flow, _ = flow_apply(spec=_flow_spec(dirs, {"webhook": "https://example.com/hooks/flows"}))

    written = flow_spec_of(flow)["notify"]

    assert written == {"webhook": "https://example.com/hooks/flows", "on": ["failed", "succeeded"]}
    assert flow_apply(spec=copy.deepcopy(flow_spec_of(flow)))[0].notify == written


def test_a_masked_url_keeps_no_credentials_nor_query():
    masked = webhook_url_masked("https://bot:hunter2@hooks.example.com:8443/flows?sig=abc#frag")

    assert masked == "https://***@hooks.example.com:8443/flows?***"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("webhook", "reason"),
    [
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
        ("http://10.0.0.1:6379/", "10.0.0.1 is a private address"),
        ("http://[::ffff:169.254.169.254]/", "::ffff:169.254.169.254 is a link-local address"),
        ("http://0x7f000001:5432/", "0x7f000001 (127.0.0.1) is a loopback address"),
        ("http://localhost:8000/admin/", "localhost (127.0.0.1) is a loopback address"),
        ("http://[::]/", ":: is an unspecified address"),
    ],
)
def test_a_webhook_to_an_internal_address_is_refused(dirs, webhook, reason, caplog):
    with logs_of(caplog, "dataflow.services.notify"), pytest.raises(ConfigError) as refused:
        flow_apply(spec=_flow_spec(dirs, {"webhook": webhook}))

    assert refused.value.field == "notify.webhook"
    assert "address refused" in refused.value.reason
    assert "DATAFLOW_ALLOWED_INTERNAL_ADDRESSES" in refused.value.reason
    assert reason in caplog.text  # the operator's log says why


@pytest.mark.django_db
def test_a_webhook_refusal_does_not_tell_loopback_from_a_name_that_does_not_resolve(dirs):
    reasons = []
    for host in ("localhost", "no-such-host.invalid"):
        with pytest.raises(ConfigError) as refused:
            flow_apply(spec=_flow_spec(dirs, {"webhook": f"http://{host}:8000/hook"}))
        reasons.append(refused.value.reason.replace(host, "HOST"))

    assert reasons[0] == reasons[1]
    assert "loopback" not in reasons[0] and "resolve" not in reasons[0].split("(")[0]


@pytest.mark.django_db
def test_an_internal_webhook_the_allow_list_names_is_taken(dirs, settings):
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["10.0.0.0/8"]

    flow, _ = flow_apply(spec=_flow_spec(dirs, {"webhook": "http://10.0.0.1:8080/hooks"}))

    assert flow.notify["webhook"] == "http://10.0.0.1:8080/hooks"


class RebindingResolver:
    """A DNS server that answers a public address to the first ``public_answers`` queries
    and loopback after (DNS rebinding). A stand-in for DNS, which the tests may not query."""

    def __init__(self, public_answers: int):
        self.public_answers = public_answers
        self.queries = 0

    def __call__(self, host, port, family=0, type=0, proto=0, flags=0):
        self.queries += 1
        address = "93.184.216.34" if self.queries <= self.public_answers else "127.0.0.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]


@pytest.mark.slow
def test_a_webhook_whose_name_rebinds_to_loopback_is_not_called(
    worker, dirs, receiver, quick_retries, settings, monkeypatch
):
    resolver = RebindingResolver(public_answers=2)
    monkeypatch.setattr(addresses, "getaddrinfo", resolver)
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = []  # the receiver's loopback is not allowed
    run = FlowRunFactory(
        running=True, flow__notify={"webhook": f"http://rebind.example:{receiver.port}/hooks/flows"}
    )
    assert resolver.queries == 2  # checked when the flow was saved and as its run started: public

    run_finish(run=run, status=RunStatus.FAILED, message="boom")

    delivery = _delivery_over(run)
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.FAILED, 1)
    assert "rebind.example (127.0.0.1) is a loopback address" in delivery.last_error
    assert receiver.calls == []
