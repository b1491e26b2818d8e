"""Each pytest-xdist worker's own Redis database (tests/worker_env.py)."""

from __future__ import annotations

import os

import pytest
from django.conf import settings

from tests.worker_env import GIVEN_REDIS_URL, redis_url_for_worker, worker_number


def test_worker_n_takes_the_database_n_below_redis_urls():
    assert redis_url_for_worker("redis://127.0.0.1:6379/15", 0) == "redis://127.0.0.1:6379/15"
    assert redis_url_for_worker("redis://127.0.0.1:6379/15", 3) == "redis://127.0.0.1:6379/12"
    assert redis_url_for_worker("redis://:pw@host:6380/9?timeout=2", 1) == "redis://:pw@host:6380/8?timeout=2"


def test_more_workers_than_databases_below_the_base_is_refused_by_name():
    with pytest.raises(RuntimeError, match=r"gw3 would need Redis database -1"):
        redis_url_for_worker("redis://127.0.0.1:6379/2", 3)


def test_this_workers_settings_use_its_own_database():
    """What the tests' processes see: under xdist, REDIS_URL (and so the settings, and every
    process a test starts) has this worker's database; without xdist, the one given."""
    number = worker_number()
    expected = GIVEN_REDIS_URL if number is None else redis_url_for_worker(GIVEN_REDIS_URL, number)
    assert settings.REDIS_URL == os.environ["REDIS_URL"] == expected
