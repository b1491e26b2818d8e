"""Every admin page, button and list action asks for the permission the matching API call
asks for. The walk is generic: it takes every model this app registers with the admin (its
own models, and others' it registers its own ModelAdmin for: DRF's tokens, beat's tasks), every
list action and every URL of its ModelAdmin, so a model registered later is walked too (give
the walk a row of it in ``_one_of_each`` and the values of any new URL parameter)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.forms.models import model_to_dict
from django.http import HttpResponse
from django.test import Client, RequestFactory
from django_celery_beat.models import IntervalSchedule, PeriodicTask
from rest_framework.authtoken.models import TokenProxy

from dataflow.admin.flows import STEERING
from dataflow.models import Connection, DataFlow, FlowStatus, SinkPathClaim, UserQuota, WebhookDelivery
from dataflow.services.flows import flow_start
from dataflow.spark.session import spark_job
from tests.factories import (
    AssignmentFactory,
    ConnectionFactory,
    DataFlowFactory,
    DeadLetterFactory,
    SplitFactory,
    TokenFactory,
    UserFactory,
    WebhookDeliveryFactory,
)
from tests.helpers import write_csv

APP = "dataflow"
#: Values the walk gives a custom admin URL's parameters (object ids come from the rows).
PARAMETER_VALUES = {"action": sorted(STEERING), "section": ["source", "sink"]}
#: Custom admin URLs that only read: a user who may view the row may open them.
#: Pages that only read (a preview and a test of connections read the source, write nothing).
READ_ONLY_URLS = {
    "dataflow_dataflow_export",
    "dataflow_flowrun_progress",
    "dataflow_dataflow_preview",
    "dataflow_dataflow_check",
}
#: The URLs every ModelAdmin has (by their name's suffix), and what they need.
STANDARD_READS = ("changelist", "change", "history")
STANDARD_WRITES = ("add", "delete")


def _registered() -> list[tuple[type, admin.ModelAdmin]]:
    """Every model with a ModelAdmin this app defines (whatever app the model is of)."""
    return [
        (model, model_admin)
        for model, model_admin in admin.site._registry.items()
        if model._meta.app_label == APP or type(model_admin).__module__.startswith(f"{APP}.")
    ]


def _app_permissions(*codenames: str):
    return Permission.objects.filter(content_type__app_label=APP, codename__in=codenames)


def _permissions(codename_prefix: str = ""):
    """The permissions of every model the walk takes (a proxy's are its own)."""
    types = ContentType.objects.get_for_models(
        *(model for model, _ in _registered()), for_concrete_models=False
    )
    return Permission.objects.filter(content_type__in=types.values(), codename__startswith=codename_prefix)


def _one_of_each(dirs) -> dict[type, object]:
    """A row of every model the admin shows, around two of bob's flows: one idle, one running."""
    bob = UserFactory(username="bob", perms=())
    write_csv(dirs.data / "bob.csv", range(10))
    idle = DataFlowFactory(name="bobs-idle", owner=bob, source_path=str(dirs.data / "bob.csv"))
    running = DataFlowFactory(name="bobs-running", owner=bob, source_path=str(dirs.data / "bob.csv"))
    run = flow_start(flow=running)
    split = SplitFactory(run=run)
    rows = {
        DataFlow: idle,
        type(run): run,
        type(split): split,
        DeadLetterFactory._meta.model: DeadLetterFactory(run=run),
        AssignmentFactory._meta.model: AssignmentFactory(split=split),
        WebhookDelivery: WebhookDeliveryFactory(
            run=run, event="succeeded", url="https://hooks.example.com/x?token=t"
        ),
        TokenProxy: TokenProxy.objects.get(pk=TokenFactory(user=bob).pk),
        Connection: ConnectionFactory(users=[bob]),
        PeriodicTask: PeriodicTask.objects.create(
            name="dataflow:bobs-idle",
            task="dataflow.tasks.flow_scheduled_run",
            interval=IntervalSchedule.objects.create(every=60, period=IntervalSchedule.SECONDS),
        ),
        UserQuota: UserQuota.objects.create(user=bob, flows=3, max_splits_per_flow=50),
        SinkPathClaim: SinkPathClaim.objects.create(owner=bob, path=str(dirs.out / "kept"), flow_name="gone"),
    }
    for model, _ in _registered():
        assert model in rows, f"the admin walk has no {model.__name__}: add one to _one_of_each"
    return rows


def _state() -> dict[str, list[dict]]:
    """Every row of every model the admin shows (and flows' statuses), to compare after."""
    return {
        model.__name__: [model_to_dict(row) for row in model.objects.order_by("pk")]
        for model, _ in _registered()
    }


def _paths(model, model_admin, row) -> list[tuple[str, str]]:
    """(url name, path) of every URL of the model's admin, parameters filled in."""
    prefix = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
    paths = []
    for pattern in model_admin.get_urls():
        if pattern.name is None:  # the old-style <id>/ redirect to <id>/change/
            continue
        route = str(pattern.pattern)
        candidates = [route]
        for parameter in re.findall(r"<(?:\w+:)?(\w+)>", route):
            if parameter == "object_id":
                values = [str(row.pk)]
            elif parameter in PARAMETER_VALUES:
                values = PARAMETER_VALUES[parameter]
            else:
                pytest.fail(f"{pattern.name}: tell the walk the values of <{parameter}> (PARAMETER_VALUES)")
            candidates = [
                re.sub(rf"<(?:\w+:)?{parameter}>", value, c, count=1) for c in candidates for value in values
            ]
        paths += [(pattern.name, prefix + c) for c in candidates]
    return paths


def _changelist(model) -> str:
    return f"/admin/{model._meta.app_label}/{model._meta.model_name}/"


def _every_action_posted(client: Client) -> Iterator[tuple[type, str, HttpResponse]]:
    """Posts each list action of each model's admin, confirmed, on every row of the model;
    yields (model, action, response) after each post."""
    for model, model_admin in _registered():
        everyone = list(model.objects.values_list("pk", flat=True))
        for action in _actions(model_admin):
            response = client.post(
                _changelist(model),
                {"action": action, "_selected_action": everyone, "index": 0, "post": "yes"},
            )
            yield model, action, response


def _every_url(rows) -> list[tuple[str, str]]:
    """(url name, path) of every URL of every model's admin, at the model's row in ``rows``."""
    return [
        (name, path)
        for model, model_admin in _registered()
        for name, path in _paths(model, model_admin, rows[model])
    ]


def _client_of(username: str, permissions, *, is_staff: bool) -> Client:
    """A client logged in as a new user who holds ``permissions`` (and nothing else)."""
    user = UserFactory(username=username, is_staff=is_staff, perms=())
    user.user_permissions.set(permissions)
    client = Client()
    client.force_login(user)
    return client


def _actions(model_admin) -> list[str]:
    """The list actions the model's admin has for a superuser (site-wide ones included)."""
    request = RequestFactory().get("/")
    request.user = type("Superuser", (), {"has_perm": lambda self, perm: True, "is_active": True})()
    return list(model_admin.get_actions(request))


@pytest.fixture()
def view_only_staff():
    """Staff who may view every model of the app, and change nothing."""
    return _client_of("viewer", _permissions("view_"), is_staff=True)


@pytest.fixture()
def non_staff_with_every_permission():
    """An ordinary user (a tenant of the API) who holds every permission of the app."""
    return _client_of("alice", _permissions(), is_staff=False)


@pytest.mark.slow
@pytest.mark.django_db
def test_view_only_staff_can_run_no_admin_action_nor_write_url(view_only_staff, dirs):
    # Warm, before the rows: the walk's preview page runs a Spark job in the test's one
    # transaction, which the rows' reader calls let sit idle only a few seconds.
    with spark_job() as spark:
        spark.range(1).collect()
    rows = _one_of_each(dirs)
    before = _state()
    assert {row.status for row in DataFlow.objects.all()} == {FlowStatus.IDLE, FlowStatus.RUNNING}

    for model, model_admin in _registered():
        page = view_only_staff.get(_changelist(model))
        assert page.status_code == 200, _changelist(model)
        offered = [action for action in _actions(model_admin) if f'value="{action}"' in page.content.decode()]
        assert offered == [], f"{_changelist(model)} offers {offered}"
    for model, action, response in _every_action_posted(view_only_staff):
        assert response.status_code in (200, 302), (model.__name__, action, response.status_code)
        assert _state() == before, f"{model.__name__}: action {action} changed rows"
    for name, path in _every_url(rows):
        reads = name in READ_ONLY_URLS or name.endswith(STANDARD_READS)
        got = view_only_staff.get(path)
        if reads:
            assert got.status_code == 200, (path, got.status_code)
        else:
            assert got.status_code in (403, 405), (path, got.status_code)
        posted = view_only_staff.post(path, {"post": "yes"})
        # A list takes POSTs of actions (walked above) and list edits (none: view only).
        if not (name in READ_ONLY_URLS or name.endswith(("history", "changelist"))):
            assert posted.status_code in (403, 405), ("POST", path, posted.status_code)
        assert _state() == before, f"POST {path} changed rows"


@pytest.mark.django_db
@pytest.mark.slow
def test_a_non_staff_user_reaches_no_admin_page_whatever_their_permissions(
    non_staff_with_every_permission, dirs
):
    rows = _one_of_each(dirs)
    before = _state()

    for _, action, response in _every_action_posted(non_staff_with_every_permission):
        assert response.status_code == 302 and "/admin/login/" in response["Location"], (action, response)
    for _, path in _every_url(rows):
        for method in (non_staff_with_every_permission.get, non_staff_with_every_permission.post):
            response = method(path)
            assert response.status_code == 302 and "/admin/login/" in response["Location"], path

    assert _state() == before


@pytest.mark.django_db
@pytest.mark.slow
def test_staff_who_may_change_flows_steer_any_users_flow_as_through_the_api(dirs):
    rows = _one_of_each(dirs)
    client = _client_of("steerer", _app_permissions("view_dataflow", "change_dataflow"), is_staff=True)

    client.post(
        f"/admin/{APP}/dataflow/",
        {"action": "start_flows", "_selected_action": [rows[DataFlow].pk], "index": 0},
    )

    assert DataFlow.objects.get(pk=rows[DataFlow].pk).status == FlowStatus.RUNNING


@pytest.mark.django_db
@pytest.mark.slow
def test_discarding_a_dead_letter_takes_the_permission_the_api_asks_for(dirs):
    rows = _one_of_each(dirs)
    letter = rows[DeadLetterFactory._meta.model]
    # delete_deadletter is no API permission: discarding through the API takes change_dataflow.
    client = _client_of("deleter", _app_permissions("view_deadletter", "delete_deadletter"), is_staff=True)

    page = client.get(f"/admin/{APP}/deadletter/").content.decode()
    client.post(
        f"/admin/{APP}/deadletter/",
        {"action": "discard_selected", "_selected_action": [letter.pk], "index": 0},
    )
    deleted = client.post(f"/admin/{APP}/deadletter/{letter.pk}/delete/", {"post": "yes"})

    assert 'value="discard_selected"' not in page
    assert deleted.status_code == 403
    assert type(letter).objects.filter(pk=letter.pk).exists()


@pytest.mark.django_db
def test_view_only_staff_cannot_run_or_stop_a_flows_schedule_in_the_beat_admin():
    every = IntervalSchedule.objects.create(every=60, period=IntervalSchedule.SECONDS)
    schedule = PeriodicTask.objects.create(
        name="dataflow:bobs-nightly", task="dataflow.tasks.flow_scheduled_run", interval=every, enabled=True
    )
    client = _client_of("beat-viewer", Permission.objects.filter(codename="view_periodictask"), is_staff=True)

    page = client.get("/admin/django_celery_beat/periodictask/").content.decode()
    for action in ("enable_tasks", "disable_tasks", "toggle_tasks", "run_tasks"):
        assert f'value="{action}"' not in page
        client.post(
            "/admin/django_celery_beat/periodictask/",
            {"action": action, "_selected_action": [schedule.pk], "index": 0},
        )

    assert PeriodicTask.objects.get(pk=schedule.pk).enabled is True
