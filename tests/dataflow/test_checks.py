"""The start-up check of the landing zone: a configuration that cannot work is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from dataflow.checks import check_landing_zone


@pytest.fixture()
def landing(settings, tmp_path):
    settings.DATAFLOW_LANDING_ROOT = tmp_path / "landing"
    settings.DATAFLOW_LANDING_SHARED = False
    settings.SPARK_MASTER = "local[*]"
    settings.SPARK_REMOTE = ""
    return settings


@pytest.mark.parametrize("master", ["local", "local[*]", "local[2]", "local-cluster[2,1,1024]"])
def test_local_master_needs_no_shared_landing_root(landing, master):
    landing.SPARK_MASTER = master

    assert check_landing_zone() == []


def test_cluster_master_with_unshared_landing_root_is_refused(landing):
    landing.SPARK_MASTER = "spark://spark-master:7077"

    errors = check_landing_zone()

    assert [e.id for e in errors] == ["dataflow.E002"]
    message = errors[0].msg
    assert "SPARK_MASTER=spark://spark-master:7077" in message
    assert str(landing.DATAFLOW_LANDING_ROOT) in message
    assert "DATAFLOW_LANDING_SHARED=1" in message and "same path" in message


def test_spark_connect_with_unshared_landing_root_is_refused(landing):
    landing.SPARK_REMOTE = "sc://spark-connect:15002"

    errors = check_landing_zone()

    assert [e.id for e in errors] == ["dataflow.E002"]
    assert "SPARK_REMOTE=sc://spark-connect:15002" in errors[0].msg


@pytest.mark.parametrize(
    "master, remote", [("spark://spark-master:7077", ""), ("local[*]", "sc://spark-connect:15002")]
)
def test_declared_shared_landing_root_is_accepted(landing, master, remote):
    landing.SPARK_MASTER, landing.SPARK_REMOTE = master, remote
    landing.DATAFLOW_LANDING_SHARED = True

    assert check_landing_zone() == []


@pytest.mark.parametrize("shared", [False, True])
def test_relative_landing_root_is_refused(landing, shared):
    landing.DATAFLOW_LANDING_ROOT = Path("var/landing")
    landing.DATAFLOW_LANDING_SHARED = shared

    errors = check_landing_zone()

    assert [e.id for e in errors] == ["dataflow.E001"]
    assert "DATAFLOW_LANDING_ROOT=var/landing is a relative path" in errors[0].msg


@pytest.mark.parametrize("url", ["s3a://bucket/landing", "gs://bucket/landing"])
def test_an_object_storage_landing_root_is_refused_as_not_supported(landing, url):
    landing.DATAFLOW_LANDING_ROOT = Path(url)

    errors = check_landing_zone()

    assert [e.id for e in errors] == ["dataflow.E003"]
    assert "object storage, which is not supported" in errors[0].msg


def test_manage_py_check_refuses_to_start(landing):
    landing.SPARK_MASTER = "spark://spark-master:7077"

    with pytest.raises(SystemCheckError, match="dataflow.E002"):
        call_command("check")


def test_spark_session_is_refused_too(landing):
    """A Celery worker runs no system checks: the transform meets the same refusal."""
    from django.core.exceptions import ImproperlyConfigured

    from dataflow.spark.session import get_spark

    landing.SPARK_MASTER = "spark://127.0.0.1:9"

    with pytest.raises(ImproperlyConfigured, match="not declared shared"):
        get_spark()


def test_keys_of_the_secrets_that_are_not_fernet_keys_are_refused_naming_which(settings):
    from cryptography.fernet import Fernet

    from dataflow.checks import check_secret_keys

    good = Fernet.generate_key().decode()
    settings.DATAFLOW_SECRET_KEYS = [good, "not-a-key-but-a-password"]

    errors = check_secret_keys()

    assert [e.id for e in errors] == ["dataflow.E004"]
    assert "DATAFLOW_SECRET_KEYS: key 2 of 2 is not a Fernet key" in errors[0].msg
    assert "not-a-key-but-a-password" not in errors[0].msg
    settings.DATAFLOW_SECRET_KEYS = []
    assert "DATAFLOW_SECRET_KEYS is empty" in check_secret_keys()[0].msg
    settings.DATAFLOW_SECRET_KEYS = [good]
    assert check_secret_keys() == []
