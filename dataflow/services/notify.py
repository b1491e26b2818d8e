"""A flow's webhook, called when a run ends: ``[notify]``, one WebhookDelivery per call.

The TOML shape (the REST API mirrors it as a ``"notify": {...}`` object)::

    [notify]
    webhook = "https://example.com/hooks/flows"   # an http(s) URL
    on = ["failed", "succeeded"]                  # run outcomes; the default; also "stopped"

When a run ends with an outcome in ``on``, ``run_finish`` creates a WebhookDelivery in its
own transaction (one per run and outcome, so ending a run twice never calls twice) and,
once that commits, queues ``dataflow.tasks.webhook_deliver``: the run never waits for the
receiver. The task POSTs the run's outcome as JSON (``webhook_payload``) with the headers
``User-Agent: activedataflow`` and ``X-Dataflow-Event: run.<outcome>``; a connection error,
a timeout, a 5xx or a 429 is retried with exponential backoff (DATAFLOW_WEBHOOK_BACKOFF_SECONDS,
doubled each time, DATAFLOW_WEBHOOK_ATTEMPTS attempts in all); any other answer outside 2xx
(redirects included: they are not followed) fails the delivery at once. The URL is called
as it was when the run ended; logs show it without credentials and query string.

A webhook may not reach an internal address (loopback, private, link-local, multicast,
reserved) unless DATAFLOW_ALLOWED_INTERNAL_ADDRESSES names it: its host is resolved and
checked when the flow is saved, and again when it is called, where the connection is made
to the address that was checked (a DNS answer that changed meanwhile cannot redirect it).
Proxies from the environment are not used: the check is of the receiver itself.
"""

from __future__ import annotations

import base64
import fnmatch
import functools
import http.client
import json
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from dataflow.encryption import Sealed, undecryptable_message
from dataflow.models import DataFlow, DeliveryStatus, FlowRun, WebhookDelivery
from dataflow.services.addresses import address_allow_list, address_check
from dataflow.services.queues import WEBHOOK_DELIVER
from dataflow.services.schema_changes import SCHEMA_CHANGED, run_schema_changes
from source_support.addresses import AddressRefused, create_checked_connection
from source_support.config import check_fields
from source_support.errors import ConfigError

log = logging.getLogger(__name__)

NOTIFY_FIELDS = {"webhook": str, "on": list}
NOTIFY_OUTCOMES = ("failed", "succeeded", "stopped")
DEFAULT_ON = ["failed", "succeeded"]
MAX_URL_CHARS = 2048  # WebhookDelivery.url
#: Beyond the longest a delivery's retries may take, before its task counts as lost.
LOST_TASK_MARGIN_S = 60
USER_AGENT = "activedataflow"


def notify_validate(table: dict[str, Any]) -> dict[str, Any]:
    """The ``[notify]`` table checked and normalized (``{}``: no webhook; ``on`` filled in);
    ConfigError naming ``notify.webhook`` or ``notify.on`` otherwise."""
    if not table:
        return {}
    check_fields("notify", table, NOTIFY_FIELDS)
    if "webhook" not in table:
        raise ConfigError("notify.webhook", "is required: the http(s) URL to call when a run ends")
    url = table["webhook"].strip()
    _check_url(url)
    on = table.get("on", DEFAULT_ON)
    unknown = [o for o in on if o not in NOTIFY_OUTCOMES]
    if not on or unknown:
        given = f" ({', '.join(map(repr, unknown))} is not one)" if unknown else ""
        raise ConfigError("notify.on", f"must list run outcomes among {', '.join(NOTIFY_OUTCOMES)}{given}")
    return {"webhook": url, "on": [o for o in NOTIFY_OUTCOMES if o in on]}


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise ConfigError("notify.webhook", f"must be an http or https URL, not {webhook_url_masked(url)!r}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError as exc:  # a port out of range or not a number
        raise ConfigError("notify.webhook", f"{webhook_url_masked(url)!r}: {exc}") from None
    if not host:
        raise ConfigError("notify.webhook", "must name a host, e.g. https://example.com/hooks/flows")
    if not webhook_host_allowed(host):
        raise ConfigError(
            "notify.webhook",
            f"{host} is not a host webhooks may call (DATAFLOW_WEBHOOK_ALLOWED_HOSTS: "
            f"{', '.join(settings.DATAFLOW_WEBHOOK_ALLOWED_HOSTS)})",
        )
    if len(url) > MAX_URL_CHARS or any(c.isspace() or ord(c) < 32 for c in url):
        raise ConfigError(
            "notify.webhook", f"must be one URL without spaces, at most {MAX_URL_CHARS} characters"
        )
    try:
        address_check(host, port or _DEFAULT_PORTS[parts.scheme.lower()], field="notify.webhook")
    except ConfigError as exc:
        # One answer whatever the reason: telling a name that resolves to an internal
        # address from one that does not resolve would map the service's network.
        log.info("webhook %s refused: %s", webhook_url_masked(url), exc.reason)
        raise ConfigError(
            "notify.webhook",
            f"{host}: address refused (a webhook calls a host that resolves to public addresses, "
            "or one DATAFLOW_ALLOWED_INTERNAL_ADDRESSES names)",
        ) from None


_DEFAULT_PORTS = {"http": 80, "https": 443}


def webhook_host_allowed(host: str) -> bool:
    """Whether webhooks may call ``host``: any host unless DATAFLOW_WEBHOOK_ALLOWED_HOSTS
    names some (exactly, or by a glob such as ``*.example.com``)."""
    allowed = settings.DATAFLOW_WEBHOOK_ALLOWED_HOSTS
    return not allowed or any(fnmatch.fnmatchcase(host.lower(), pattern) for pattern in allowed)


def webhook_url_masked(url: str) -> str:
    """The URL as logs may show it: its user and password, query and fragment replaced
    by ``***`` (they often carry a token)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "***" if parts.query else "", ""))


def notify_masked(table: dict[str, Any]) -> dict[str, Any]:
    """The ``[notify]`` table as the API and exports show it: the webhook masked (see
    ``webhook_url_masked``); write-only like a connector's secrets."""
    if not isinstance(table.get("webhook"), str):
        return dict(table)
    return {**table, "webhook": webhook_url_masked(table["webhook"])}


def notify_unmasked(new: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
    """``new`` with a webhook sent back exactly as ``notify_masked`` showed the stored one
    replaced by the stored URL; any other value is a new webhook."""
    stored_url = stored.get("webhook")
    if isinstance(stored_url, str) and new.get("webhook") == webhook_url_masked(stored_url):
        return {**new, "webhook": stored_url}
    return dict(new)


def run_notify(*, run: FlowRun, status: str) -> WebhookDelivery | None:
    """Inside ``run_finish``'s transaction: records the call of the flow's webhook about
    this outcome of the run, if ``[notify]`` asks for it, and queues it once the transaction
    commits. Once per run and outcome: returns None if there is nothing to call or it was
    recorded before."""
    status = str(status)
    notify = DataFlow.objects.filter(pk=run.flow_id).values_list("notify", flat=True).first() or {}
    if not notify.get("webhook") or status not in notify.get("on", DEFAULT_ON):
        return None
    delivery, created = WebhookDelivery.objects.get_or_create(
        run_id=run.pk, event=f"run.{status}", defaults={"flow_id": run.flow_id, "url": notify["webhook"]}
    )
    if not created:
        return None
    # robust: the run has ended whatever the broker says; a delivery not queued stays pending.
    transaction.on_commit(lambda: current_app.send_task(WEBHOOK_DELIVER, args=[delivery.pk]), robust=True)
    return delivery


#: Events about a flow rather than a run's outcome: sent whenever the flow has a webhook
#: (``on`` lists run outcomes only), each once per change of the flow's state.
FLOW_EVENTS = ("flow.stale", "flow.paused")


def flow_notify(*, flow_id: int, event: str) -> WebhookDelivery | None:
    """Inside the caller's transaction: records the call of the flow's webhook about a
    flow event (``FLOW_EVENTS``), about its latest run if it has one, and queues it once
    the transaction commits. The caller makes it once per change (a conditional update of
    the flow's state); returns None if the flow has no webhook."""
    notify = DataFlow.objects.filter(pk=flow_id).values_list("notify", flat=True).first() or {}
    if not notify.get("webhook"):
        return None
    run_id = FlowRun.objects.filter(flow_id=flow_id).order_by("-id").values_list("pk", flat=True).first()
    delivery = WebhookDelivery.objects.create(
        flow_id=flow_id, run_id=run_id, event=event, url=notify["webhook"]
    )
    transaction.on_commit(lambda: current_app.send_task(WEBHOOK_DELIVER, args=[delivery.pk]), robust=True)
    return delivery


def webhook_payload(delivery: WebhookDelivery) -> dict[str, Any]:
    """The JSON body of a delivery: the run's outcome and counters (a flow event: the
    flow's state, with its latest run's counters if it has one). ``url_of_run`` is there
    when DATAFLOW_PUBLIC_URL says where the site is."""
    run = delivery.run
    if delivery.event in FLOW_EVENTS:
        return _flow_event_payload(delivery)
    assert run is not None  # a run's outcome has its run
    payload: dict[str, Any] = {
        "flow": delivery.flow.name,
        "run": run.pk,
        "event": delivery.event,
        "status": run.status if delivery.event == SCHEMA_CHANGED else delivery.event.removeprefix("run."),
        "trigger": run.trigger,
        "message": run.message,
        "records_read": run.records_read,
        "rows_written": run.rows_written,
        "errors": run.errors_count,
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
    }
    if delivery.event == SCHEMA_CHANGED:
        payload["schema_changes"] = run_schema_changes(run)
    base = settings.DATAFLOW_PUBLIC_URL
    if base:
        payload["url_of_run"] = base.rstrip("/") + reverse("admin:dataflow_flowrun_change", args=[run.pk])
    return payload


def _flow_event_payload(delivery: WebhookDelivery) -> dict[str, Any]:
    flow = delivery.flow
    payload: dict[str, Any] = {
        "flow": flow.name,
        "run": delivery.run_id,
        "event": delivery.event,
        "status": delivery.event.removeprefix("flow."),
        "stale_since": flow.stale_since.isoformat() if flow.stale_since else None,
        "freshness": flow.freshness or None,
        "message": flow.schedule_paused_message if delivery.event == "flow.paused" else "",
        "created_at": delivery.created_at.isoformat(),
    }
    if delivery.event == "flow.stale":
        payload["message"] = f"the sink has not moved for {flow.freshness}"
    base = settings.DATAFLOW_PUBLIC_URL
    if base:
        payload["url_of_flow"] = base.rstrip("/") + reverse("admin:dataflow_dataflow_change", args=[flow.pk])
    return payload


@dataclass(frozen=True)
class CallOutcome:
    """What one POST got: the receiver's HTTP status (None: no answer) and, unless it
    took the call, why not and whether trying again may help."""

    response_status: int | None
    error: str = ""
    retryable: bool = False

    @property
    def delivered(self) -> bool:
        return self.response_status is not None and 200 <= self.response_status < 300


def webhook_deliveries_resume(*, now=None) -> int:
    """Sends the delivery task again for each pending delivery older than every retry it
    could still be waiting for (its task was lost: the broker was down when the run ended,
    or a worker died between attempts); returns how many. Beat runs it each minute. A task
    that was only late finds its attempt taken (the claim is conditional) and does nothing."""
    now = now or timezone.now()
    attempts = settings.DATAFLOW_WEBHOOK_ATTEMPTS
    longest = settings.DATAFLOW_WEBHOOK_BACKOFF_SECONDS * (2**attempts - 1) + (
        attempts * settings.DATAFLOW_WEBHOOK_TIMEOUT_SECONDS
    )
    stale = now - timedelta(seconds=longest + LOST_TASK_MARGIN_S)
    lost = list(
        WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING, created_at__lt=stale).values_list(
            "pk", flat=True
        )
    )
    for delivery_id in lost:
        current_app.send_task(WEBHOOK_DELIVER, args=[delivery_id])
    if lost:
        log.warning("webhook deliveries %s had lost their task: sent again", lost)
    return len(lost)


def webhook_deliver(*, delivery_id: int) -> float | None:
    """One attempt of a pending delivery. Returns the seconds to wait before the next
    attempt, or None when the delivery is over (delivered, refused, out of attempts) or
    not this call's to make (another worker took this attempt)."""
    delivery = (
        WebhookDelivery.objects.select_related("run", "flow")
        .filter(pk=delivery_id, status=DeliveryStatus.PENDING)
        .first()
    )
    if delivery is None:
        return None
    attempt = delivery.attempts + 1
    # The claim is a conditional update, not a row lock held while the receiver answers.
    claimed = WebhookDelivery.objects.filter(
        pk=delivery.pk, status=DeliveryStatus.PENDING, attempts=delivery.attempts
    ).update(attempts=attempt)
    if not claimed:
        return None
    host = urlsplit(delivery.url).hostname or ""
    if isinstance(delivery.url, Sealed):  # no key decrypts it: nothing to call, nothing to retry
        outcome = CallOutcome(None, undecryptable_message(f"webhook of flow {delivery.flow.name!r}", ["url"]))
    elif webhook_host_allowed(host):
        outcome = _post(delivery.url, webhook_payload(delivery), event=delivery.event)
    else:  # the allowed hosts changed since the flow was saved
        outcome = CallOutcome(None, f"{host} is not in DATAFLOW_WEBHOOK_ALLOWED_HOSTS: not called")
    retry = outcome.retryable and attempt < settings.DATAFLOW_WEBHOOK_ATTEMPTS
    if outcome.delivered:
        status = DeliveryStatus.DELIVERED
    else:
        status = DeliveryStatus.PENDING if retry else DeliveryStatus.FAILED
    WebhookDelivery.objects.filter(pk=delivery.pk, attempts=attempt).update(
        status=status,
        response_status=outcome.response_status,
        last_error=outcome.error,
        delivered_at=timezone.now() if outcome.delivered else None,
    )
    _log_attempt(delivery, attempt, outcome, status)
    if status == DeliveryStatus.PENDING:
        return settings.DATAFLOW_WEBHOOK_BACKOFF_SECONDS * 2 ** (attempt - 1)
    return None


def _log_attempt(delivery: WebhookDelivery, attempt: int, outcome: CallOutcome, status: str) -> None:
    where = f"webhook {webhook_url_masked(delivery.url)} of flow {delivery.flow.name}"
    if status == DeliveryStatus.DELIVERED:
        log.info("%s took %s of run %s (attempt %s)", where, delivery.event, delivery.run_id, attempt)
    elif status == DeliveryStatus.PENDING:
        log.info("%s: attempt %s failed (%s); will retry", where, attempt, outcome.error)
    else:
        log.warning(
            "%s: %s of run %s not delivered after %s attempt(s): %s",
            where,
            delivery.event,
            delivery.run_id,
            attempt,
            outcome.error,
        )


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A webhook answers where it was called: a redirect is a final answer, not followed
    (it could lead the POST, and any credentials, elsewhere)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class _CheckedHTTPConnection(http.client.HTTPConnection):
    """Connects only to an address of the host that the address policy allows, checked as
    it connects (against DNS rebinding); AddressRefused otherwise."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._create_connection = functools.partial(create_checked_connection, allowed=address_allow_list())


class _CheckedHTTPSConnection(http.client.HTTPSConnection):
    """As ``_CheckedHTTPConnection``; TLS still verifies the certificate of the host's name."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._create_connection = functools.partial(create_checked_connection, allowed=address_allow_list())


class _CheckedHTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req):
        return self.do_open(_CheckedHTTPConnection, req)


class _CheckedHTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req):
        # As HTTPSHandler.https_open: the handler keeps its TLS context in _context, which
        # typeshed does not declare.
        return self.do_open(
            _CheckedHTTPSConnection,
            req,
            context=self._context,  # pyright: ignore[reportAttributeAccessIssue]
        )


# No proxies from the environment: a proxy would connect on our behalf, unchecked.
_opener = urllib.request.build_opener(
    urllib.request.ProxyHandler({}), _CheckedHTTPHandler, _CheckedHTTPSHandler, _NoRedirects
)


def _post(url: str, payload: dict[str, Any], *, event: str) -> CallOutcome:
    """POSTs ``payload`` as JSON; credentials in the URL go as HTTP Basic authentication."""
    parts = urlsplit(url)
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, "X-Dataflow-Event": event}
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(credentials).decode()
        url = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    body = json.dumps(payload).encode()
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _opener.open(request, timeout=settings.DATAFLOW_WEBHOOK_TIMEOUT_SECONDS) as response:
            return CallOutcome(response.status)
    except AddressRefused as exc:  # resolved to an internal address as it connected
        return CallOutcome(None, f"not called: {exc}"[:1000])
    except urllib.error.HTTPError as exc:
        exc.close()
        code = exc.code
        followed = " (redirects are not followed)" if 300 <= code < 400 else ""
        return CallOutcome(code, f"HTTP {code} {exc.reason}{followed}", retryable=code == 429 or code >= 500)
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:  # refused, timed out, no host
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return CallOutcome(None, f"{type(exc).__name__}: {reason}"[:1000], retryable=True)
