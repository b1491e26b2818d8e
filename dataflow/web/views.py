"""Dashboard pages and the JSON they poll; what they show comes from
``dataflow.selectors.dashboard``.

A page is rendered once on the server; it then polls its ``live.json`` view, which sends
the same data and the page's changing parts rendered by the same templates, so there is
one way to draw a table.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from django.contrib.auth.decorators import login_required
from django.http import FileResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.template.loader import render_to_string
from django.urls import reverse_lazy
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_safe

from dataflow.selectors.dashboard import fleet_warnings, flow_dashboard, flow_overview
from dataflow.selectors.visibility import flows_visible

#: How often a page asks for fresh data.
POLL_MS = 3000
#: The parts of a flow's page that each poll redraws (``dataflow/dashboard/flow/_<part>.html``).
FLOW_PARTS = ("state", "kpis", "expectations", "splits", "runs", "errors")

#: The site's icon, served at /favicon.ico whether or not static files are served (a browser
#: asks for it on every page that names none, and a 404 is a console error there).
FAVICON = Path(__file__).resolve().parents[1] / "static" / "dataflow" / "favicon.ico"

dashboard_login_required = partial(login_required, login_url=reverse_lazy("dataflow:dashboard:login"))


@dashboard_login_required
def index(request):
    flows = flow_overview(user=request.user)
    context = {"flows": flows, "warnings": fleet_warnings(), "poll_ms": POLL_MS}
    return render(request, "dataflow/dashboard/index.html", context)


@dashboard_login_required
def index_live(request):
    flows = flow_overview(user=request.user)
    html = {
        "flows": render_to_string("dataflow/dashboard/_flow_rows.html", {"flows": flows}, request),
        "summary": render_to_string(
            "dataflow/dashboard/_summary.html", {"flows": flows, "warnings": fleet_warnings()}, request
        ),
    }
    return JsonResponse({"now": timezone.now(), "flows": flows, "html": html})


@dashboard_login_required
def flow_page(request, name: str):
    flow = get_object_or_404(flows_visible(user=request.user), name=name)
    data = flow_dashboard(flow=flow)
    return render(request, "dataflow/dashboard/flow.html", {"flow": flow, "data": data, "poll_ms": POLL_MS})


@dashboard_login_required
def flow_live(request, name: str):
    """The flow page's data; with ``run`` (the run the page charts) and ``since`` (its
    latest sample's time) only the samples after it, unless a newer run has started."""
    flow = get_object_or_404(flows_visible(user=request.user), name=name)
    data = flow_dashboard(
        flow=flow, run_id=_int_or_none(request.GET.get("run")), since=_time_or_none(request.GET.get("since"))
    )
    context = {"flow": flow, "data": data}
    html = {
        part: render_to_string(f"dataflow/dashboard/flow/_{part}.html", context, request)
        for part in FLOW_PARTS
    }
    return JsonResponse({"now": timezone.now(), **data, "html": html})


@require_safe
@cache_control(public=True, max_age=86400)
def favicon(request):
    return FileResponse(FAVICON.open("rb"), content_type="image/x-icon")


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None  # a bad parameter asks for the whole series


def _time_or_none(text: str | None):
    try:
        moment = parse_datetime(text) if text else None
    except ValueError:
        return None
    return moment if moment is not None and timezone.is_aware(moment) else None
