"""applyflows refuses hostile TOML with a message, never a traceback, and reads
``${NAME:-default}`` from the environment (the admin's import does not)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from dataflow.models import DataFlow
from dataflow.services.toml_import import flow_spec_from_toml, flow_spec_with_environment


@pytest.mark.django_db
@pytest.mark.parametrize(
    "value",
    ["[" * 5000 + "]" * 5000, "{ a = " * 3000 + "1" + " }" * 3000],
    ids=["arrays", "inline-tables"],
)
def test_a_deeply_nested_toml_value_is_refused_with_a_message(tmp_path, value):
    path = tmp_path / "deep.toml"
    path.write_text(f'[flow]\nname = "deep"\ndescription = {value}\n')

    with pytest.raises(CommandError, match="nested too deeply"):
        call_command("applyflows", str(path))
    assert not DataFlow.objects.exists()


# The README's examples, each with the environment variable its server's address comes
# from, and that address's default (the README names both).
EXAMPLE_ADDRESSES = [
    ("examples/nats/orders.toml", "nats-orders", "servers", "NATS_URL", "nats://127.0.0.1:4222"),
    (
        "examples/kafka/orders.toml",
        "kafka-orders",
        "bootstrap_servers",
        "KAFKA_BOOTSTRAP_SERVERS",
        "127.0.0.1:9092",
    ),
    (
        "examples/kinesis/orders.toml",
        "kinesis-orders",
        "endpoint_url",
        "KINESIS_ENDPOINT_URL",
        "http://127.0.0.1:4571",
    ),
    ("examples/s3/penguins.toml", "s3-penguins", "endpoint_url", "S3_ENDPOINT_URL", "http://127.0.0.1:9000"),
]
ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "name", "option", "variable", "default"), EXAMPLE_ADDRESSES)
def test_each_examples_address_comes_from_its_environment_variable(
    monkeypatch, path, name, option, variable, default
):
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv(variable, raising=False)
    call_command("applyflows", path, stdout=io.StringIO())
    assert DataFlow.objects.get(name=name).source_config[option] == default

    moved = default.replace("127.0.0.1", "10.1.2.3").rsplit(":", 1)[0] + ":4444"
    monkeypatch.setenv(variable, moved)
    call_command("applyflows", path, stdout=io.StringIO())
    assert DataFlow.objects.get(name=name).source_config[option] == moved
    readme = (ROOT / "README.md").read_text()
    assert f"`{variable}`" in readme and f"${{{variable}:-{default}}}" in readme


@pytest.mark.django_db
def test_a_reference_to_an_unset_variable_without_a_default_is_refused_naming_the_field(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("ADF_NO_SUCH_VARIABLE", raising=False)
    path = tmp_path / "flow.toml"
    path.write_text(
        '[flow]\nname = "env"\n[source]\ntype = "sequence"\ncount = 10\n'
        '[transform]\nsql = "SELECT * FROM source"\n'
        '[sink]\ntype = "parquet"\npath = "${ADF_NO_SUCH_VARIABLE}/out"\n'
    )

    with pytest.raises(CommandError, match=r"sink\.path: \$\{ADF_NO_SUCH_VARIABLE\} is not set"):
        call_command("applyflows", str(path))
    assert not DataFlow.objects.exists()


def test_only_references_are_expanded_and_a_doubled_dollar_is_literal():
    environ = {"A": "x", "EMPTY": ""}
    spec = {"s": {"v": "${A}-${EMPTY:-d}-${B:-e}-$${A}-$A-${A:-y}", "l": ["${A}", 3]}, "n": 1}

    assert flow_spec_with_environment(spec=spec, environ=environ) == {
        "s": {"v": "x-d-e-${A}-$A-x", "l": ["x", 3]},
        "n": 1,
    }


@pytest.mark.django_db
def test_a_toml_text_from_the_admin_is_not_expanded(monkeypatch):
    monkeypatch.setenv("ADF_SECRET", "s3cr3t")

    assert flow_spec_from_toml('[flow]\ndescription = "${ADF_SECRET}"\n') == {
        "flow": {"description": "${ADF_SECRET}"}
    }
