import pytest

from tests.e2e.fleet import Fleet
from tests.e2e.streams_helpers import quick_stream_intervals


@pytest.fixture()
def fleet(dirs, tmp_path):
    """Worker and beat processes started by the test; all are SIGKILLed at its end."""
    fleet = Fleet(tmp_path)
    yield fleet
    fleet.close()


@pytest.fixture()
def quick(settings, dirs):
    """The test's directories, with short stream intervals (``quick_stream_intervals``); a
    module that needs other intervals defines its own ``quick``."""
    quick_stream_intervals(settings)
    return dirs
