"""The flow form is built from the connectors' declared options and refuses what the TOML
validation refuses, on the field the refusal names."""

from __future__ import annotations

import html

import pytest

from dataflow.admin.option_fields import option_form_field
from dataflow.models import DataFlow
from source_support.options import Option
from source_support.registry import section_options
from tests.dataflow.admin.conftest import ADD_URL, browser_post
from tests.factories import DataFlowFactory


def _change_url(flow: DataFlow) -> str:
    return f"/admin/dataflow/dataflow/{flow.pk}/change/"


@pytest.mark.django_db
def test_add_form_lists_the_registered_types_and_each_options_help(admin_client):
    response = admin_client.get(ADD_URL)

    assert response.status_code == 200
    page = response.content.decode()
    form = response.context["adminform"].form
    assert {"files", "redis_streams", "sequence"} <= {
        value for value, _ in form.fields["source_type"].choices
    }
    assert {"csv", "jsonl"} <= {value for value, _ in form.fields["format_type"].choices}
    assert {"parquet", "csv", "redis_stream"} <= {value for value, _ in form.fields["sink_type"].choices}
    path_help = next(o for o in section_options("source", "files") if o.name == "path").help
    assert html.escape(path_help, quote=False) in page
    assert '<label for="id_source__files__path">path:</label>' in page
    assert 'aria-describedby="id_source__files__path_helptext"' in page


@pytest.mark.django_db
@pytest.mark.slow
def test_add_form_shows_each_options_default(admin_client):
    response = admin_client.get(ADD_URL)

    form = response.context["adminform"].form
    assert form["source__files__split_size_mb"].value() == 64
    assert form["sink__parquet__compression"].value() == "snappy"
    assert "Default: <code>snappy</code>." in str(form.fields["sink__parquet__compression"].help_text)


@pytest.mark.django_db
@pytest.mark.slow
def test_each_types_options_are_in_a_fieldset_named_for_the_type(admin_client):
    page = admin_client.get(ADD_URL).content.decode()

    assert 'class="module aligned adf-options adf-source-options adf-type-redis_streams"' in page
    assert "Used when the source type is redis_streams." in page


@pytest.mark.django_db
@pytest.mark.slow
def test_posting_a_valid_flow_creates_it_owned_by_the_user(add_flow, admin_user):
    response = add_flow()

    assert response.status_code == 302, response.context["adminform"].form.errors
    flow = DataFlow.objects.get(name="admin-flow")
    assert flow.owner == admin_user
    assert flow.source_type == "files"
    assert flow.format_options["schema"] == "id BIGINT, sensor STRING, temperature DOUBLE"
    assert flow.sink_config["compression"] == "snappy"  # the default, left as shown


@pytest.mark.django_db
@pytest.mark.slow
def test_a_path_outside_the_allowed_roots_is_shown_on_the_source_path_field(add_flow):
    response = add_flow(source__files__path="/etc/passwd")

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["source__files__path"]
    assert "outside the allowed roots" in errors["source__files__path"][0]
    assert not DataFlow.objects.exists()


@pytest.mark.django_db
@pytest.mark.slow
def test_a_sink_option_error_is_shown_on_its_field(add_flow):
    response = add_flow(sink_type="csv", sink__csv__path="/etc/out")

    errors = response.context["adminform"].form.errors
    assert "sink.path" in errors["sink__csv__path"][0]


@pytest.mark.django_db
@pytest.mark.slow
def test_a_stray_value_in_a_type_not_chosen_is_ignored(add_flow):
    response = add_flow(source__redis_streams__discovery_interval_ms="not a number")

    assert response.status_code == 302
    # The files source's own default is stored, not the redis_streams value.
    assert DataFlow.objects.get(name="admin-flow").source_config["discovery_interval_ms"] == 10_000


@pytest.mark.django_db
@pytest.mark.slow
def test_a_missing_required_option_is_named_on_its_field(add_flow):
    response = add_flow(source__files__path="")

    errors = response.context["adminform"].form.errors
    assert "source.path: is required" in errors["source__files__path"][0]


@pytest.mark.django_db
@pytest.mark.slow
def test_a_name_already_taken_is_refused_on_add(add_flow):
    add_flow()

    response = add_flow(parallelism="3")

    assert response.status_code == 200
    assert "already exists" in response.context["adminform"].form.errors["name"][0]
    assert DataFlow.objects.get(name="admin-flow").parallelism == 2


@pytest.mark.django_db
@pytest.mark.slow
def test_a_bad_schedule_is_shown_on_the_cron_field(add_flow):
    response = add_flow(schedule_cron="every day")

    assert "schedule.cron" in response.context["adminform"].form.errors["schedule_cron"][0]


@pytest.mark.django_db
@pytest.mark.slow
def test_a_schedule_and_a_webhook_are_saved(add_flow):
    response = add_flow(
        schedule_every="15 minutes", notify_webhook="https://example.com/hook", notify_on=["failed"]
    )

    assert response.status_code == 302, response.context["adminform"].form.errors
    flow = DataFlow.objects.get(name="admin-flow")
    assert flow.schedule == {"every": "15 minutes"}
    assert flow.notify == {"webhook": "https://example.com/hook", "on": ["failed"]}


@pytest.mark.django_db
@pytest.mark.slow
def test_change_form_shows_the_stored_values_and_saves_an_edit(admin_client, csv_flow):
    page = admin_client.get(_change_url(csv_flow))
    form = page.context["adminform"].form
    assert form["source__files__path"].value() == csv_flow.source_config["path"]
    assert form.fields["name"].disabled

    response = admin_client.post(_change_url(csv_flow), browser_post(page, batch_size="250"))

    assert response.status_code == 302, response.context["adminform"].form.errors
    csv_flow.refresh_from_db()
    assert csv_flow.batch_size == 250
    assert csv_flow.name == "csv-flow"
    assert csv_flow.owner is None  # an edit does not take the flow over


@pytest.mark.django_db
@pytest.mark.slow
def test_a_secret_is_shown_masked_and_kept_when_left_unchanged(admin_client, dirs):
    flow = DataFlowFactory(stream=True, stream_url="redis://:s3cret@127.0.0.1:6379/7")

    page = admin_client.get(_change_url(flow))
    assert "s3cret" not in page.content.decode()
    assert (
        page.context["adminform"].form["source__redis_streams__url"].value()
        == "redis://:****@127.0.0.1:6379/7"
    )

    response = admin_client.post(_change_url(flow), browser_post(page, parallelism="3"))

    assert response.status_code == 302, response.context["adminform"].form.errors
    flow.refresh_from_db()
    assert flow.source_config["url"] == "redis://:s3cret@127.0.0.1:6379/7"
    assert flow.parallelism == 3


@pytest.mark.django_db
@pytest.mark.slow
def test_a_secret_typed_anew_replaces_the_stored_one(admin_client, dirs):
    flow = DataFlowFactory(stream=True, stream_url="redis://:s3cret@127.0.0.1:6379/7")
    page = admin_client.get(_change_url(flow))

    admin_client.post(
        _change_url(flow), browser_post(page, source__redis_streams__url="redis://:other@127.0.0.1:6379/7")
    )

    flow.refresh_from_db()
    assert flow.source_config["url"] == "redis://:other@127.0.0.1:6379/7"


def test_an_options_help_is_shown_as_text_not_markup():
    option = Option("path", str, "Files <b>here</b> & there", example="<x>")

    shown = str(option_form_field(option).help_text)

    assert "Files &lt;b&gt;here&lt;/b&gt; &amp; there" in shown
    assert "Example: <code>&lt;x&gt;</code>." in shown


@pytest.mark.django_db
@pytest.mark.slow
def test_null_values_with_an_empty_text_are_taken_and_shown_as_a_json_array(admin_client, add_flow):
    response = add_flow(format__csv__null_values='["", "NA"]', format__csv__date_format="yyyy/MM/dd")

    assert response.status_code == 302, response.context["adminform"].form.errors
    flow = DataFlow.objects.get(name="admin-flow")
    assert flow.format_options["null_values"] == ["", "NA"]
    assert flow.format_options["date_format"] == "yyyy/MM/dd"
    page = admin_client.get(_change_url(flow))
    assert page.context["adminform"].form["format__csv__null_values"].value() == '["", "NA"]'


@pytest.mark.django_db
@pytest.mark.slow
def test_null_values_that_are_not_a_list_are_refused_on_their_field(add_flow):
    response = add_flow(format__csv__null_values='["NA"')

    assert response.status_code == 200
    assert "must be a list" in str(response.context["adminform"].form.errors)


@pytest.mark.django_db
@pytest.mark.slow
def test_the_avro_format_is_offered_and_a_flow_in_it_is_saved(admin_client, add_flow):
    page = admin_client.get(ADD_URL).content.decode()
    assert 'class="module aligned adf-options adf-format-options adf-type-avro"' in page
    assert '<label for="id_format__avro__writer_schema">writer_schema:</label>' in page

    response = add_flow(format_type="avro")

    assert response.status_code == 302, response.context["adminform"].form.errors
    flow = DataFlow.objects.get(name="admin-flow")
    assert flow.format_type == "avro" and flow.format_options == {}


@pytest.mark.django_db
@pytest.mark.slow
def test_a_bad_avro_writer_schema_is_shown_on_its_field(add_flow):
    response = add_flow(format_type="avro", format__avro__writer_schema='{"type": "record"')

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["format__avro__writer_schema"]
    assert "is not JSON" in errors["format__avro__writer_schema"][0]


@pytest.mark.django_db
@pytest.mark.slow
def test_the_nats_source_and_sink_are_offered_and_a_flow_through_them_is_saved(admin_client, add_flow):
    page = admin_client.get(ADD_URL).content.decode()
    assert 'class="module aligned adf-options adf-source-options adf-type-nats_jetstream"' in page
    assert '<label for="id_source__nats_jetstream__stream">stream:</label>' in page
    assert '<label for="id_sink__nats__subject">subject:</label>' in page

    response = add_flow(
        source_type="nats_jetstream",
        source__nats_jetstream__servers="nats://app:s3cret@127.0.0.1:4222",
        source__nats_jetstream__stream="ORDERS",
        format_type="jsonl",
        sink_type="nats",
        sink__nats__servers="nats://127.0.0.1:4222",
        sink__nats__subject="orders.large",
    )

    assert response.status_code == 302, response.context["adminform"].form.errors
    flow = DataFlow.objects.get(name="admin-flow")
    assert (flow.source_type, flow.sink_type) == ("nats_jetstream", "nats")
    assert flow.source_config["stream"] == "ORDERS" and flow.sink_config["subject"] == "orders.large"
    change = admin_client.get(_change_url(flow)).content.decode()
    assert "s3cret" not in change and "nats://app:****@127.0.0.1:4222" in change


@pytest.mark.django_db
@pytest.mark.slow
def test_no_admin_form_shows_an_example_as_a_placeholder(admin_client, dirs):
    # A placeholder in an empty field reads as a value already filled in (orders-aws,
    # http://127.0.0.1:9000): examples are help text, on every add and change page.
    from tests.dataflow.admin.test_permissions import _one_of_each, _registered  # noqa: PLC0415 - its walk

    rows = _one_of_each(dirs)
    pages, checked = [], 0
    for model, _ in _registered():
        base = f"/admin/{model._meta.app_label}/{model._meta.model_name}"
        pages += [f"{base}/add/", f"{base}/{rows[model].pk}/change/"]
    for url in pages:
        response = admin_client.get(url)
        assert response.status_code in (200, 403), url  # some models cannot be added by hand
        if response.status_code == 200 and "adminform" in response.context:
            form = response.context["adminform"].form
            shown = {
                name: f.widget.attrs["placeholder"]
                for name, f in form.fields.items()
                if "placeholder" in f.widget.attrs
            }
            assert shown == {}, url
            checked += 1
    assert checked > len(pages) / 2

    form = admin_client.get(ADD_URL).context["adminform"].form
    assert "Example: <code>http://127.0.0.1:9000</code>." in str(
        form.fields["source__s3__endpoint_url"].help_text
    )
    assert "Example: <code>orders-aws</code>." in str(form.fields["source__s3__connection"].help_text)
    assert "https://example.com/hooks/flows" in str(form.fields["notify_webhook"].help_text)
