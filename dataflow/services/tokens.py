"""API tokens: one per user, made at login (``POST /api/auth/token/``), revoked by its
holder (``DELETE``) and whenever the user's password changes, and, when
``DATAFLOW_TOKEN_TTL`` gives a lifetime in seconds, refused once older than that."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from rest_framework.authtoken.models import Token


def token_ttl() -> timedelta | None:
    """The lifetime of a token (None: it lasts until revoked)."""
    seconds = int(getattr(settings, "DATAFLOW_TOKEN_TTL", 0) or 0)
    return timedelta(seconds=seconds) if seconds > 0 else None


def token_expires_at(*, token: Token) -> datetime | None:
    """When ``token`` stops being accepted (None: never)."""
    ttl = token_ttl()
    return token.created + ttl if ttl is not None else None


def token_expired(*, token: Token) -> bool:
    expires = token_expires_at(token=token)
    return expires is not None and expires <= timezone.now()


@transaction.atomic
def token_issue(*, user) -> Token:
    """The user's token: the current one, or a new one if it has expired or there is none."""
    token = Token.objects.select_for_update().filter(user=user).first()
    if token is not None and token_expired(token=token):
        token.delete()
        token = None
    return token or Token.objects.create(user=user)


def token_revoke(*, user) -> int:
    """Revokes the user's token (its holder logs in again for a new one); how many went."""
    deleted, _ = Token.objects.filter(user=user).delete()
    return deleted


def token_revoke_if_password_changed(*, user) -> None:
    """Revokes the token of ``user`` (about to be saved) if its password differs from the
    stored one: a token made with the old password must not outlive it."""
    if user.pk is None:
        return
    stored = get_user_model().objects.filter(pk=user.pk).values_list("password", flat=True).first()
    if stored is not None and stored != user.password:
        token_revoke(user=user)
