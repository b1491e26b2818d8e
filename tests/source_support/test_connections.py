"""Key patterns of a connection: which globs stay inside them (decided conservatively)."""

from __future__ import annotations

import pytest

from source_support.connections import glob_within, prefixes_overlap, url_with_credentials, url_with_host


@pytest.mark.parametrize(
    ("glob", "inside"),
    [
        ("alice:orders", True),
        ("alice:*", True),
        ("alice:orders:*", True),
        ("alice:[ab]*", True),
        ("*", False),
        ("al*", False),
        ("bob:*", False),
        ("?lice:*", False),
        ("[ab]lice:*", False),
        ("bob:orders", False),
    ],
)
def test_a_glob_is_inside_the_patterns_only_if_every_match_is(glob, inside):
    assert glob_within(glob, ["alice:*"]) is inside


def test_no_patterns_allow_any_key():
    assert glob_within("*", [])


@pytest.mark.parametrize(
    ("pattern", "overlaps"),
    [
        ("adf:*", True),
        ("ad*", True),
        ("*", True),
        ("a*", True),
        ("team:*", False),
        ("adfx:*", False),
        ("adf:x", True),
    ],
)
def test_a_pattern_that_may_match_the_deployments_keys_overlaps(pattern, overlaps):
    assert prefixes_overlap(pattern, "adf:") is overlaps


def test_credentials_and_a_checked_host_go_into_the_url():
    url = url_with_credentials("redis://redis.example:6380/2", "app", "p@ss")

    assert url == "redis://app:p%40ss@redis.example:6380/2"
    assert url_with_host(url, "93.184.216.34") == "redis://app:p%40ss@93.184.216.34:6380/2"
    assert url_with_host("redis://h/0", "::1") == "redis://[::1]/0"
