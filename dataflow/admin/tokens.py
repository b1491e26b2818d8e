"""API tokens in the admin, shown masked: a token is a credential, and no one, superusers
included, reads another user's key here. DRF's own TokenAdmin lists every key in full to
anyone holding ``view_tokenproxy``; it is replaced by this one.

A superuser may create a token for a user (the key is shown to them once, on creation);
anyone with ``delete_tokenproxy`` may revoke one. Users get their own key from
``POST /api/auth/token/`` or the operator's ``manage.py drf_create_token``.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.options import IS_POPUP_VAR, TO_FIELD_VAR
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import BadRequest
from rest_framework.authtoken.admin import TokenAdmin as DrfTokenAdmin
from rest_framework.authtoken.models import TokenProxy

#: How much of a key the admin shows: enough to tell two tokens apart, not to use one.
SHOWN_KEY_CHARS = 4


def token_key_masked(key: str) -> str:
    """``key``'s first characters then ``****``: what the admin shows of an API token."""
    return f"{key[:SHOWN_KEY_CHARS]}****"


# The admin names an object by str() in titles, breadcrumbs, the delete page, its messages
# and the change log (LogEntry.object_repr, kept in the database); DRF's str() of a token is
# its key. TokenProxy exists only for the admin (DRF: "Proxy mapping pk to user pk for use in
# admin"), so its str() is masked here, once, rather than in each of those places.
TokenProxy.__str__ = lambda self: token_key_masked(self.key)

admin.site.unregister(TokenProxy)  # DRF's TokenAdmin, registered when its app loaded


@admin.register(TokenProxy)
class TokenAdmin(DrfTokenAdmin):
    """DRF's token admin (rows addressed by their user's id), with the key masked
    everywhere, no lookup or popup that could read it, and creation for superusers only."""

    list_display = ("masked_key", "user", "created")

    @admin.display(description="key")
    def masked_key(self, token: TokenProxy) -> str:
        return token_key_masked(token.key)

    def get_fields(self, request, obj=None):
        return ("user",) if obj is None else ("user", "masked_key", "created")

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else ("user", "masked_key", "created")

    def has_add_permission(self, request) -> bool:
        # A token made for someone else is a credential handed over: superusers only.
        user = request.user
        # The user model is an AbstractUser (auth.User), or the user is anonymous and never
        # active; the stubs type a logged-in user as AbstractBaseUser, which has no flags.
        return isinstance(user, AbstractUser) and user.is_active and user.is_superuser

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # the key is the server's and the user fixed: nothing to change

    def lookup_allowed(self, lookup, value, request=None) -> bool:
        # Django allows any lookup on a local field from the list's query string:
        # ?key__startswith=a would let a viewer read a key one character at a time by
        # counting rows. This list has no filters, so it takes no lookups at all.
        return False

    def _refuse_popups(self, request) -> None:
        # A popup list or form names each row by its primary key, which is the token's key
        # (data-popup-opener="<key>"); nothing here is picked through a popup.
        if any(var in request.GET or var in request.POST for var in (IS_POPUP_VAR, TO_FIELD_VAR)):
            raise BadRequest("API tokens cannot be picked through a popup.")

    def changelist_view(self, request, extra_context=None):
        self._refuse_popups(request)
        return super().changelist_view(request, extra_context)

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        self._refuse_popups(request)
        return super().changeform_view(request, object_id, form_url, extra_context)

    def delete_view(self, request, object_id, extra_context=None):
        self._refuse_popups(request)
        return super().delete_view(request, object_id, extra_context)

    def response_add(self, request, obj, post_url_continue=None):
        # The one time the key is shown: to the superuser who made it, to hand over.
        self.message_user(
            request,
            f"The API token of {obj.user}: {obj.key} (copy it now: it is not shown again).",
            messages.WARNING,
        )
        return super().response_add(request, obj, post_url_continue)
