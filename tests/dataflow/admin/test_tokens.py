"""API tokens are credentials: the admin never shows another user's key, to view-only staff
or to superusers, on any page (list, change, history, delete, popups), nor lets a viewer
find one by filtering the list."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.test import Client
from rest_framework.authtoken.models import Token

pytestmark = pytest.mark.django_db

LIST = "/admin/authtoken/tokenproxy/"


@pytest.fixture()
def bobs_token(django_user_model) -> Token:
    return Token.objects.create(user=django_user_model.objects.create_user("bob", password="pw-bob-1"))


def _staff(django_user_model, name: str, *codenames: str) -> Client:
    user = django_user_model.objects.create_user(name, password=f"pw-{name}-1", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def _pages(token: Token) -> list[str]:
    """Every page of the token admin about ``token`` (rows are addressed by their user's id)."""
    row = f"{LIST}{token.user_id}"
    return [LIST, f"{LIST}?q=bob", f"{row}/change/", f"{row}/history/", f"{row}/delete/"]


@pytest.mark.slow
def test_staff_who_may_view_tokens_cannot_read_another_users_key(django_user_model, bobs_token):
    viewer = _staff(django_user_model, "viewer", "view_tokenproxy")

    pages = {path: viewer.get(path) for path in _pages(bobs_token)}

    assert pages[LIST].status_code == 200
    assert pages[f"{LIST}{bobs_token.user_id}/change/"].status_code == 200
    for path, page in pages.items():
        assert bobs_token.key not in page.content.decode(), path
    assert f"{bobs_token.key[:4]}****" in pages[LIST].content.decode()


@pytest.mark.slow
def test_a_superuser_cannot_read_another_users_key_either(admin_client, bobs_token):
    pages = {path: admin_client.get(path) for path in _pages(bobs_token)}
    deleted = admin_client.post(f"{LIST}{bobs_token.user_id}/delete/", {"post": "yes"}, follow=True)

    for path, page in pages.items():
        assert page.status_code == 200, path
        assert bobs_token.key not in page.content.decode(), path
    assert bobs_token.key not in deleted.content.decode()
    assert not Token.objects.filter(key=bobs_token.key).exists()
    assert not LogEntry.objects.filter(object_repr__contains=bobs_token.key).exists()


@pytest.mark.parametrize(
    "query",
    ["_popup=1", "_popup=1&_to_field=key", "_to_field=key"],
)
def test_a_popup_list_does_not_name_rows_by_their_key(admin_client, bobs_token, query):
    page = admin_client.get(f"{LIST}?{query}")

    assert page.status_code == 400
    assert bobs_token.key not in page.content.decode()


@pytest.mark.parametrize("lookup", ["key__startswith", "pk__startswith", "user__auth_token__key__startswith"])
def test_the_list_cannot_be_filtered_by_key(django_user_model, bobs_token, lookup):
    viewer = _staff(django_user_model, "viewer", "view_tokenproxy")

    right = viewer.get(f"{LIST}?{lookup}={bobs_token.key[:1]}")
    wrong = viewer.get(f"{LIST}?{lookup}={'0' if bobs_token.key[0] != '0' else '1'}")

    # Filtered, the two answers would differ (1 row, 0 rows): a key read a character at a time.
    assert right.content == wrong.content
    assert bobs_token.key not in right.content.decode()


def test_a_superuser_creating_a_token_sees_its_key_once(admin_client, django_user_model):
    carol = django_user_model.objects.create_user("carol", password="pw-carol-1")

    created = admin_client.post(f"{LIST}add/", {"user": carol.pk}, follow=True)
    key = Token.objects.get(user=carol).key
    again = admin_client.get(LIST)

    assert key in created.content.decode()
    assert key not in again.content.decode()
    assert not LogEntry.objects.filter(object_repr__contains=key).exists()


def test_staff_who_may_add_tokens_cannot_make_one_for_another_user(django_user_model):
    carol = django_user_model.objects.create_user("carol", password="pw-carol-1")
    adder = _staff(django_user_model, "adder", "view_tokenproxy", "add_tokenproxy")

    response = adder.post(f"{LIST}add/", {"user": carol.pk})

    assert response.status_code == 403
    assert not Token.objects.filter(user=carol).exists()
