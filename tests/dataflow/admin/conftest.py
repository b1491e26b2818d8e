"""Fixtures of the admin tests: what a browser would post, and small valid flows."""

from __future__ import annotations

import pytest
from django import forms

from dataflow.models import DataFlow
from tests.factories import DataFlowFactory
from tests.helpers import write_csv

ADD_URL = "/admin/dataflow/dataflow/add/"


def browser_post(response, **changes) -> dict:
    """The data a browser posts from the admin form page in ``response``: every field as the
    page shows it (checked boxes only, the inlines' management forms), then ``changes``."""
    form = response.context["adminform"].form
    data: dict = {}
    for name, field in form.fields.items():
        if field.disabled:
            continue
        data.update(_posted(form.add_prefix(name), field, form[name].value()))
    for inline in response.context["inline_admin_formsets"]:
        management = inline.formset.management_form
        for name in management.fields:
            data[management.add_prefix(name)] = management[name].value()
    for name, value in changes.items():
        if value is None:
            data.pop(name, None)
        else:
            data[name] = value
    return data


def _posted(key: str, field: forms.Field, value) -> dict:
    widget = getattr(field.widget, "widget", field.widget)  # the admin wraps related fields
    if isinstance(widget, forms.CheckboxSelectMultiple | forms.SelectMultiple):
        return {key: [str(v) for v in value or []]}
    if isinstance(widget, forms.NullBooleanSelect):
        return {key: {True: "true", False: "false"}.get(value, "unknown")}
    if isinstance(widget, forms.CheckboxInput):
        return {key: "on"} if value else {}
    return {key: "" if value is None else str(value)}


def csv_flow_changes(dirs, name: str = "admin-flow", **changes) -> dict:
    """Form changes that make the add form a small CSV-to-Parquet flow."""
    write_csv(dirs.data / "a.csv", range(5))
    return {
        "name": name,
        "source_type": "files",
        "source__files__path": str(dirs.data / "*.csv"),
        "format_type": "csv",
        "format__csv__schema": "id BIGINT, sensor STRING, temperature DOUBLE",
        "transform_sql": "SELECT * FROM source",
        "sink_type": "parquet",
        "sink__parquet__path": str(dirs.out / "sink"),
        "parallelism": "2",
        **changes,
    }


@pytest.fixture()
def add_flow(admin_client, dirs):
    """Posts the add form as a browser would, with ``changes``; returns the response."""

    def post(**changes):
        page = admin_client.get(ADD_URL)
        return admin_client.post(ADD_URL, browser_post(page, **csv_flow_changes(dirs, **changes)))

    return post


@pytest.fixture()
def csv_flow(dirs) -> DataFlow:
    """A small valid CSV flow, created through the service."""
    write_csv(dirs.data / "csv-flow.csv", range(10))
    return DataFlowFactory(name="csv-flow", source_path=str(dirs.data / "csv-flow.csv"))
