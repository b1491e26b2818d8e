"""Named connections in the admin: staff with the connection permissions create them,
grant them to users and groups, and never see their secrets (the url is shown masked,
the password not at all; left as shown, the stored ones are kept). Saved through
``connection_save``, as the API does."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.admin.widgets import FilteredSelectMultiple
from django.contrib.auth.models import AbstractUser
from django.db import transaction
from django.http import Http404
from django.template.response import TemplateResponse
from django.urls import path
from django.views.decorators.http import require_POST

from dataflow.models import Connection
from dataflow.services.connection_test import connection_test, connection_test_refusal, credentials_masked
from dataflow.services.connections import connection_delete, connection_masked, connection_save
from dataflow.services.errors import TooManyAtOnce
from source_support.connections import CONNECTION_KINDS
from source_support.errors import ConfigError


class ConnectionForm(forms.ModelForm):
    """The connection's fields; ``clean`` saves nothing, ``save_model`` calls the service."""

    type = forms.ChoiceField(choices=())
    url = forms.CharField(
        widget=forms.TextInput(attrs={"size": 80}),
        help_text="Such as redis://:password@host:6379/0. Shown with its credentials masked; "
        "left as shown, the stored URL is kept.",
    )
    password = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Used when the URL holds none. Never shown; left empty, the stored one is kept.",
    )
    key_patterns = forms.CharField(
        required=False,
        help_text="Globs of the keys flows may read or write through it, separated by commas "
        "(orders:*, alice:*); empty: any key. Required for the deployment's own Redis.",
    )

    class Meta:
        model = Connection
        fields = [
            "name",
            "type",
            "description",
            "url",
            "username",
            "password",
            "key_patterns",
            "users",
            "groups",
        ]
        widgets = {
            "users": FilteredSelectMultiple("users", False),
            "groups": FilteredSelectMultiple("groups", False),
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        type_field = self.fields.get("type")
        if isinstance(type_field, forms.ChoiceField):  # not for staff who may only view
            type_field.choices = [(k, k) for k in sorted(CONNECTION_KINDS)]
        if self.instance.pk:
            self.initial["url"] = connection_masked(self.instance)["url"]
            self.initial["key_patterns"] = ", ".join(self.instance.key_patterns)
        self.saved_fields: dict[str, Any] = {}

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data  # what ModelForm.clean returns
        if self.errors:
            return cleaned
        patterns = [p.strip() for p in (cleaned.get("key_patterns") or "").split(",") if p.strip()]
        password = cleaned.get("password") or ""
        if self.instance.pk and not password:
            password = connection_masked(self.instance)["password"]  # unchanged: keep the stored one
        self.saved_fields = {
            "name": cleaned["name"],
            "type": cleaned["type"],
            "description": cleaned.get("description", ""),
            "url": cleaned["url"],
            "username": cleaned.get("username", ""),
            "password": password,
            "key_patterns": patterns,
            "users": list(cleaned.get("users") or []),
            "groups": list(cleaned.get("groups") or []),
        }
        try:
            # Checked inside a transaction that is rolled back: the form shows the
            # service's refusal on its field, and save_model saves for real.
            _dry_run(self.saved_fields, self.instance if self.instance.pk else None)
        except ConfigError as exc:
            self.add_error(exc.field if exc.field in self.fields else None, exc.reason)
        return cleaned


class _DryRun(Exception):
    pass


def _dry_run(fields: dict[str, Any], connection: Connection | None) -> None:
    try:
        with transaction.atomic():
            connection_save(
                **fields, connection=Connection.objects.get(pk=connection.pk) if connection else None
            )
            raise _DryRun
    except _DryRun:
        pass


@admin.register(Connection)
class ConnectionAdmin(admin.ModelAdmin):
    form = ConnectionForm
    list_display = ["name", "type", "shown_url", "patterns", "updated_at"]
    search_fields = ["name", "description"]
    filter_horizontal = ["users", "groups"]

    @admin.display(description="URL")
    def shown_url(self, connection: Connection) -> str:
        return connection_masked(connection)["url"]

    @admin.display(description="key patterns")
    def patterns(self, connection: Connection) -> str:
        return ", ".join(connection.key_patterns) or "any key"

    #: What staff who may only view see: the secrets masked (the model's own url and
    #: password fields would be shown as stored).
    VIEW_FIELDS = ["name", "type", "description", "shown_url", "username", "patterns", "users", "groups"]

    def get_fields(self, request, obj=None):
        if obj is not None and not self.has_change_permission(request, obj):
            return self.VIEW_FIELDS
        return super().get_fields(request, obj)

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and not self.has_change_permission(request, obj):
            return self.VIEW_FIELDS
        return ()

    def has_module_permission(self, request) -> bool:
        user = request.user
        # The user model is an AbstractUser (auth.User), or the user is anonymous and never
        # active; the stubs type a logged-in user as AbstractBaseUser, which has no flags.
        return (
            isinstance(user, AbstractUser)
            and user.is_active
            and user.is_staff
            and super().has_module_permission(request)
        )

    def save_model(self, request, obj, form, change):
        # The one way in: the same service as the API.
        # The stored row, not ``obj``: the form has put the masked url on ``obj``.
        stored = Connection.objects.get(pk=obj.pk) if change else None
        saved = connection_save(**form.saved_fields, connection=stored)
        obj.pk = saved.pk

    def save_related(self, request, form, formsets, change):
        pass  # the grants were set by connection_save

    def delete_model(self, request, obj):
        connection_delete(connection=obj)

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path(
                "<path:object_id>/test-connection/",
                wrap(require_POST(self.test_view)),
                name="dataflow_connection_test",
            ),
            *super().get_urls(),
        ]

    def test_view(self, request, object_id: str):
        """The "Test connection" button: ``connection_test``, under the API's rule
        (``connection_test_refusal``: who may only view connections is refused, 403)."""
        connection = self.get_object(request, unquote(object_id))
        if connection is None:
            raise Http404(f"no connection with id {object_id!r}")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Test connection {connection.name}",
            "original": connection,
        }
        status = 200
        refusal = connection_test_refusal(connection=connection, user=request.user)
        if refusal is not None:
            context["error"] = f"Test connection refused: {refusal}."
            status = 403
        else:
            try:
                context["result"] = connection_test(connection=connection, user=request.user)
            except (ConfigError, TooManyAtOnce) as exc:
                context["error"] = credentials_masked(str(exc))
        return TemplateResponse(request, "admin/dataflow/connection/test.html", context, status=status)
