"""What a failed transform says: one line a person can act on, not ``o103.parquet``."""

from __future__ import annotations

import pytest

from dataflow.spark.errors import spark_error_message
from dataflow.spark.jobs import quiet_query_errors
from dataflow.spark.session import spark_job


def test_a_write_the_jvm_refuses_names_the_java_cause(tmp_path):
    (tmp_path / "afile").write_text("a file where a directory should be")
    with spark_job() as spark, quiet_query_errors(), pytest.raises(Exception) as raised:
        spark.range(3).write.parquet(str(tmp_path / "afile" / "sink"))

    message = spark_error_message(raised.value)

    assert "An error occurred while calling" not in message
    assert "afile" in message and "\n" not in message, message


def test_a_spark_error_keeps_its_first_line():
    class AnalysisException(Exception):
        pass

    error = AnalysisException("[UNRESOLVED_COLUMN] `x` cannot be resolved.\n== SQL ==\nSELECT x")

    assert spark_error_message(error) == "[UNRESOLVED_COLUMN] `x` cannot be resolved."
