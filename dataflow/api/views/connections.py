"""Named connections: users list and read those granted to them (never their secrets);
staff see all and create, change and delete them."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, Group
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status, viewsets
from rest_framework.permissions import SAFE_METHODS, BasePermission, IsAuthenticated
from rest_framework.response import Response

from dataflow.api.permissions import WriteRateThrottle
from dataflow.api.schema import errors
from dataflow.api.serializers import ConnectionSerializer, ConnectionWriteSerializer
from dataflow.api.views.base import WRITE_SCOPE, ApiDefaults
from dataflow.models import Connection
from dataflow.selectors.visibility import connections_visible
from dataflow.services.connections import connection_delete, connection_save
from source_support.errors import ConfigError

#: The model permission a write needs, as the admin asks for it (view-only staff write nothing).
WRITE_PERMISSIONS = {
    "POST": "dataflow.add_connection",
    "PUT": "dataflow.change_connection",
    "DELETE": "dataflow.delete_connection",
}


class StaffWrites(BasePermission):
    """Reads for any user (they see what is granted to them); writes for staff who hold
    the matching model permission (add, change or delete connection), as in the admin."""

    message = "only staff with the add, change or delete connection permission may write connections"

    def has_permission(self, request, view) -> bool:
        if request.method in SAFE_METHODS:
            return True
        permission = WRITE_PERMISSIONS.get(request.method or "")
        user = request.user  # an AbstractUser (auth.User), or anonymous: never staff
        return (
            isinstance(user, AbstractUser)
            and user.is_staff
            and permission is not None
            and user.has_perm(permission)
        )


@extend_schema_view(
    list=extend_schema(
        summary="List the connections you may use (staff: all)",
        responses={200: ConnectionSerializer(many=True), **errors()},
    ),
    retrieve=extend_schema(
        summary="A connection (its url masked; its password never returned)",
        responses={200: ConnectionSerializer, **errors(404)},
    ),
    create=extend_schema(
        summary="Create a connection (staff only)",
        request=ConnectionWriteSerializer,
        responses={201: ConnectionSerializer, **errors(400, 403, 429)},
    ),
    update=extend_schema(
        summary="Replace a connection (staff only); a secret sent back masked keeps the stored one",
        request=ConnectionWriteSerializer,
        responses={200: ConnectionSerializer, **errors(400, 403, 404, 429)},
    ),
    destroy=extend_schema(
        summary="Delete a connection (staff only): flows naming it can no longer start",
        responses={204: None, **errors(403, 404, 429)},
    ),
)
class ConnectionViewSet(ApiDefaults, viewsets.GenericViewSet):
    """Connections by name."""

    serializer_class = ConnectionSerializer
    permission_classes = [IsAuthenticated, StaffWrites]
    throttle_classes = [WriteRateThrottle]
    throttle_scope = WRITE_SCOPE
    lookup_field = "name"
    lookup_value_regex = r"[-a-zA-Z0-9_]+"
    http_method_names = ["get", "post", "put", "delete", "head", "options"]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no user
            return Connection.objects.none()
        return connections_visible(user=self.request.user).prefetch_related("users", "groups")

    def list(self, request):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(
            ConnectionSerializer(page, many=True, context=self._context()).data
        )

    def retrieve(self, request, name: str):
        return Response(ConnectionSerializer(self.get_object(), context=self._context()).data)

    def create(self, request):
        connection = connection_save(**self._fields(request))
        return Response(
            ConnectionSerializer(connection, context=self._context()).data, status=status.HTTP_201_CREATED
        )

    def update(self, request, name: str):
        connection = connection_save(**self._fields(request), connection=self.get_object())
        return Response(ConnectionSerializer(connection, context=self._context()).data)

    def destroy(self, request, name: str):
        connection_delete(connection=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _context(self) -> dict:
        user = self.request.user  # an AbstractUser (auth.User), or anonymous: never staff
        return {"staff": isinstance(user, AbstractUser) and user.is_staff}

    def _fields(self, request) -> dict:
        serializer = ConnectionWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        fields = dict(serializer.validated_data)
        fields["users"] = _named(get_user_model().objects, "username", fields.pop("users", []), "users")
        fields["groups"] = _named(Group.objects, "name", fields.pop("groups", []), "groups")
        return fields


def _named(manager, attribute: str, names: list[str], field: str) -> list:
    found = list(manager.filter(**{f"{attribute}__in": names}))
    missing = sorted(set(names) - {getattr(row, attribute) for row in found})
    if missing:
        raise ConfigError(field, f"no such {field[:-1]}: {', '.join(missing)}")
    return found
