"""Password guessing is throttled per user name and per client address, in Redis (shared by
every web process), on the API's token endpoint and on the dashboard's and admin's login
pages: beyond the limit, a 429 with Retry-After, whatever the password."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from dataflow.redis_client import get_redis
from dataflow.services.login_throttle import (
    UNAVAILABLE_RETRY_AFTER_S,
    client_address,
    login_attempt_begin,
    login_rate_parse,
)

pytestmark = pytest.mark.django_db

PASSWORD = "right-pw-1"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture()
def rates(settings):
    """Small limits: 3 failures per user name, 5 per address, per 15 minutes."""
    settings.DATAFLOW_LOGIN_USERNAME_RATE = "3/15m"
    settings.DATAFLOW_LOGIN_ADDRESS_RATE = "5/15m"
    settings.DATAFLOW_TRUSTED_PROXIES = 0
    return settings


@pytest.fixture()
def alice():
    return get_user_model().objects.create_user("alice", password=PASSWORD, is_staff=True)


@pytest.fixture()
def redis_down(rates):
    """The throttle's client (``get_redis``, built from REDIS_URL) pointed at a loopback port
    that is bound but not listening, so every connection is refused at once."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # held, never listened on: refused, and no one else gets it
    rates.REDIS_URL = f"redis://127.0.0.1:{closed.getsockname()[1]}/0"
    get_redis.cache_clear()
    yield
    get_redis.cache_clear()  # the next caller builds a client from the restored REDIS_URL
    closed.close()


def _token(username: str, password: str, **extra):
    return APIClient().post(
        "/api/auth/token/", {"username": username, "password": password}, format="json", **extra
    )


def test_the_token_endpoint_refuses_a_user_name_after_too_many_wrong_passwords(rates, alice):
    wrong = [_token("alice", f"guess-{i}").status_code for i in range(3)]
    refused = _token("alice", PASSWORD)

    assert wrong == [400, 400, 400]
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 15 * 60
    assert refused.json() == {
        "detail": f"Too many failed logins for this user name or from this address: "
        f"try again in {refused['Retry-After']} second(s)."
    }


@pytest.mark.slow
def test_one_address_guessing_across_user_names_is_refused(rates, alice):
    wrong = [_token(f"user-{i}", "guess").status_code for i in range(5)]

    assert wrong == [400] * 5
    assert _token("alice", PASSWORD).status_code == 429


@pytest.mark.slow
def test_one_user_name_guessed_from_many_addresses_is_refused(rates, alice):
    wrong = [_token("alice", "guess", REMOTE_ADDR=f"198.51.100.{i}").status_code for i in range(3)]

    assert wrong == [400] * 3
    assert _token("alice", PASSWORD, REMOTE_ADDR="198.51.100.99").status_code == 429


@pytest.mark.slow
def test_a_made_up_x_forwarded_for_does_not_escape_the_address_limit(rates, alice):
    spoofed = [
        _token(f"user-{i}", "guess", HTTP_X_FORWARDED_FOR=f"203.0.113.{i}").status_code for i in range(5)
    ]

    assert spoofed == [400] * 5
    assert _token("bob", "guess", HTTP_X_FORWARDED_FOR="203.0.113.200").status_code == 429


@pytest.mark.slow
def test_behind_a_trusted_proxy_the_client_is_the_address_the_proxy_wrote(rates, alice):
    rates.DATAFLOW_TRUSTED_PROXIES = 1
    # The client makes up the left part; the proxy (10.0.0.2) appends the address it saw.
    for i in range(5):
        response = _token(
            f"user-{i}", "guess", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR=f"192.0.2.{i}, 203.0.113.9"
        )
        assert response.status_code == 400

    from_the_same_client = _token("bob", "guess", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="203.0.113.9")
    another_client = _token("alice", PASSWORD, REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="203.0.113.10")

    assert from_the_same_client.status_code == 429
    assert another_client.status_code == 200


@pytest.mark.slow
def test_a_login_is_no_failure_and_forgets_the_user_names_failures(rates, alice):
    before = [_token("alice", "guess").status_code for _ in range(2)]
    right = _token("alice", PASSWORD)
    after = [_token("alice", "guess").status_code for _ in range(3)]

    assert before == [400, 400]
    assert right.status_code == 200
    assert after == [400, 400, 400]  # the user name's count started again at the login
    assert _token("alice", PASSWORD).status_code == 429


def test_others_failures_on_other_user_names_do_not_lock_a_user_out(rates, alice):
    for _ in range(3):
        _token("bob", "guess", REMOTE_ADDR="192.0.2.50")  # bob is locked, from another address

    assert _token("bob", "guess", REMOTE_ADDR="192.0.2.50").status_code == 429
    assert _token("alice", PASSWORD, REMOTE_ADDR="192.0.2.51").status_code == 200
    assert _token("alice", PASSWORD, REMOTE_ADDR="192.0.2.50").status_code == 200  # 3 < 5 from there


def test_the_dashboard_login_page_answers_429_with_retry_after(rates, alice, client):
    wrong = [client.post("/login/", {"username": "alice", "password": "guess"}).status_code for _ in range(3)]
    refused = client.post("/login/", {"username": "alice", "password": PASSWORD})

    assert wrong == [200, 200, 200]  # the form again, with "do not match"
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    assert "Too many failed logins" in refused.content.decode()
    assert "_auth_user_id" not in client.session


def test_the_admin_login_page_answers_429_with_retry_after(rates, alice, client):
    wrong = [
        client.post("/admin/login/", {"username": "alice", "password": "guess"}).status_code for _ in range(3)
    ]
    refused = client.post("/admin/login/", {"username": "alice", "password": PASSWORD})

    assert wrong == [200, 200, 200]
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    assert "Too many failed logins" in refused.content.decode()
    assert "_auth_user_id" not in client.session


def test_the_login_pages_and_the_token_endpoint_share_one_count(rates, alice, client):
    client.post("/login/", {"username": "alice", "password": "guess"})
    client.post("/admin/login/", {"username": "alice", "password": "guess"})
    _token("alice", "guess")

    assert _token("alice", PASSWORD).status_code == 429


def test_a_right_password_on_the_login_pages_is_not_a_failure(rates, alice, client):
    for _ in range(4):
        response = client.post("/admin/login/", {"username": "alice", "password": PASSWORD})
        assert response.status_code == 302
        client.logout()


def test_concurrent_guesses_get_no_more_tries_than_the_limit(rates):
    outcomes: list[bool] = []
    barrier = threading.Barrier(20)

    def guess() -> None:
        barrier.wait()
        outcomes.append(login_attempt_begin(username="alice", address="192.0.2.1").refused)

    threads = [threading.Thread(target=guess) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert outcomes.count(False) == 3


@pytest.mark.slow
def test_another_web_process_sees_the_same_failures(rates, alice):
    for _ in range(3):
        _token("alice", "guess")

    code = (
        "from django.conf import settings; settings.DATAFLOW_LOGIN_USERNAME_RATE = '3/15m'; "
        "from dataflow.services.login_throttle import login_attempt_begin; "
        "print(login_attempt_begin(username='alice', address='192.0.2.77').refused)"
    )
    other = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )

    assert other.stdout.strip().splitlines()[-1] == "True"


@pytest.mark.parametrize(
    ("remote", "forwarded", "proxies", "expected"),
    [
        ("192.0.2.1", "203.0.113.5", 0, "192.0.2.1"),
        ("10.0.0.2", "198.51.100.1, 203.0.113.5", 1, "203.0.113.5"),
        ("10.0.0.3", "198.51.100.1, 203.0.113.5, 10.0.0.2", 2, "203.0.113.5"),
        ("10.0.0.2", "not-an-address", 1, "10.0.0.2"),
        ("10.0.0.2", "", 1, "10.0.0.2"),
        ("2001:db8:1:2:3:4:5:6", "", 0, "2001:db8:1:2::/64"),
        ("::ffff:192.0.2.9", "", 0, "192.0.2.9"),
    ],
)
def test_the_client_address(remote, forwarded, proxies, expected):
    assert client_address(remote_addr=remote, forwarded_for=forwarded, trusted_proxies=proxies) == expected


def test_a_rate_that_is_not_one_names_its_setting():
    assert login_rate_parse("10/15m", setting="S").window_s == 900
    assert login_rate_parse("30/h", setting="S").failures == 30
    with pytest.raises(ValueError, match="DATAFLOW_LOGIN_ADDRESS_RATE: 'often' is no rate"):
        login_rate_parse("often", setting="DATAFLOW_LOGIN_ADDRESS_RATE")


def test_without_redis_the_token_endpoint_answers_503_and_gives_no_token(redis_down, alice):
    refused = _token("alice", PASSWORD)

    assert refused.status_code == 503
    assert refused["Retry-After"] == str(UNAVAILABLE_RETRY_AFTER_S)
    assert "failed logins cannot be counted" in refused.json()["detail"]
    assert "token" not in refused.json()


def test_without_redis_the_dashboard_login_answers_503_and_logs_no_one_in(redis_down, alice, client):
    refused = client.post("/login/", {"username": "alice", "password": PASSWORD})

    assert refused.status_code == 503
    assert refused["Retry-After"] == str(UNAVAILABLE_RETRY_AFTER_S)
    assert refused["Content-Type"].startswith("text/plain")
    assert "Logging in is unavailable" in refused.content.decode()
    assert "_auth_user_id" not in client.session


def test_without_redis_the_admin_login_answers_503_and_logs_no_one_in(redis_down, alice, client):
    refused = client.post("/admin/login/", {"username": "alice", "password": PASSWORD})

    assert refused.status_code == 503
    assert refused["Retry-After"] == str(UNAVAILABLE_RETRY_AFTER_S)
    assert "Logging in is unavailable" in refused.content.decode()
    assert "_auth_user_id" not in client.session
