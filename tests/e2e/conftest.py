import pytest

from tests.e2e.fleet import Fleet


@pytest.fixture()
def fleet(dirs, tmp_path):
    """Worker and beat processes started by the test; all are SIGKILLed at its end."""
    fleet = Fleet(tmp_path)
    yield fleet
    fleet.close()
