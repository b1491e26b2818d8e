"""The sink kit over the parquet, csv and json sinks at s3:// paths, on a local Spark session.

S3 itself cannot be reached here: the store is a moto server (``python -m moto.server``, a
real S3-protocol HTTP endpoint) this module starts on a free loopback port and stops by pid.
"""

from __future__ import annotations

import pytest

from source_support.testing.sink_suite import SinkConformanceSuite
from tests.connectors.files.s3_sink_support import S3SinkContext, moto_with_bucket

pytestmark = pytest.mark.slow  # each class runs five Spark writes against the server


@pytest.fixture(scope="module")
def moto():
    yield from moto_with_bucket()


class TestS3ParquetSinkConformance(SinkConformanceSuite):
    @pytest.fixture()
    def sink_context(self, moto, env):
        return S3SinkContext(moto, "parquet", env)


class TestS3CsvSinkConformance(SinkConformanceSuite):
    @pytest.fixture()
    def sink_context(self, moto, env):
        return S3SinkContext(moto, "csv", env)


class TestS3JsonSinkConformance(SinkConformanceSuite):
    @pytest.fixture()
    def sink_context(self, moto, env):
        return S3SinkContext(moto, "json", env)
