"""API tokens: revoked by a password change and by their holder (DELETE), refused once older
than DATAFLOW_TOKEN_TTL, and obtained with JSON or a form. Two ordinary users: a change to
one's token leaves the other's alone."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db

TOKEN_URL = "/api/auth/token/"


def logged_in(user, *, format: str = "json") -> tuple[APIClient, str]:
    """A client holding the token ``user`` gets by logging in with the password."""
    anonymous = APIClient()
    response = anonymous.post(TOKEN_URL, {"username": user.username, "password": PASSWORD}, format=format)
    assert response.status_code == 200, response.content
    client = APIClient()
    key = response.json()["token"]
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client, key


def test_a_password_change_revokes_the_users_token(alice, bob):
    client, _ = logged_in(alice)
    bobs, _ = logged_in(bob)

    alice.set_password("a-new-password")
    alice.save()

    assert client.get("/api/flows/").status_code == 401
    assert bobs.get("/api/flows/").status_code == 200


def test_a_password_changed_in_the_admin_revokes_the_token(alice, admin_client):
    client, _ = logged_in(alice)

    changed = admin_client.post(
        f"/admin/auth/user/{alice.pk}/password/",
        {"password1": "another-Pass-42", "password2": "another-Pass-42", "usable_password": "true"},
    )

    assert changed.status_code == 302
    assert client.get("/api/flows/").status_code == 401


def test_saving_a_user_without_changing_the_password_keeps_the_token(alice):
    client, _ = logged_in(alice)

    alice.first_name = "Alice"
    alice.save()

    assert client.get("/api/flows/").status_code == 200


@pytest.mark.slow
def test_delete_revokes_the_callers_token_only(alice, bob):
    client, _ = logged_in(alice)
    bobs, _ = logged_in(bob)

    revoked = client.delete(TOKEN_URL)

    assert revoked.status_code == 204
    assert client.get("/api/flows/").status_code == 401
    assert bobs.get("/api/flows/").status_code == 200
    assert APIClient().delete(TOKEN_URL).status_code == 401
    _, new_key = logged_in(alice)
    assert Token.objects.get(user=alice).key == new_key


def test_a_token_older_than_its_lifetime_is_refused_saying_so(alice, settings):
    settings.DATAFLOW_TOKEN_TTL = 3600
    client, key = logged_in(alice)
    assert client.get("/api/flows/").status_code == 200
    Token.objects.filter(key=key).update(created=timezone.now() - timedelta(hours=2))

    refused = client.get("/api/flows/")

    assert refused.status_code == 401
    assert "expired" in refused.json()["detail"] and "POST /api/auth/token/" in refused.json()["detail"]
    fresh, new_key = logged_in(alice)
    assert new_key != key and fresh.get("/api/flows/").status_code == 200


def test_a_token_lasts_until_revoked_without_a_lifetime(alice, settings):
    settings.DATAFLOW_TOKEN_TTL = 0
    client, key = logged_in(alice)
    Token.objects.filter(key=key).update(created=timezone.now() - timedelta(days=400))

    assert client.get("/api/flows/").status_code == 200


@pytest.mark.parametrize("format", ["json", "multipart"])
def test_a_token_is_given_for_json_or_a_form(alice, format):
    _, key = logged_in(alice, format=format)

    assert Token.objects.get(user=alice).key == key


def test_a_token_is_given_for_a_urlencoded_form(alice):
    body = f"username={alice.username}&password={PASSWORD}"

    response = APIClient().post(TOKEN_URL, body, content_type="application/x-www-form-urlencoded")

    assert response.status_code == 200, response.content
    assert response.json()["token"] == Token.objects.get(user=alice).key
