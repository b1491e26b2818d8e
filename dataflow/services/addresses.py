"""The deployment's address policy (``DATAFLOW_ALLOWED_INTERNAL_ADDRESSES``) over
``source_support.addresses``: what webhooks and the connections of non-staff users may reach."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings

from source_support.addresses import AddressAllowList, AddressRefused, IPAddress, checked_addresses
from source_support.errors import ConfigError


def address_allow_list() -> AddressAllowList:
    """The internal hosts, addresses and networks the deployment allows (read on each call,
    so a changed setting is obeyed); a ConfigError names a bad entry."""
    try:
        return AddressAllowList.parse(settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES)
    except ValueError as exc:
        raise ConfigError("DATAFLOW_ALLOWED_INTERNAL_ADDRESSES", str(exc)) from None


def address_check(host: str, port: int | None, *, field: str) -> list[IPAddress]:
    """The checked addresses of ``host`` (see ``checked_addresses``); a ConfigError naming
    ``field`` if it may not be contacted."""
    try:
        return checked_addresses(host, port, allowed=address_allow_list())
    except AddressRefused as exc:
        raise ConfigError(field, str(exc)) from None


def url_address_check(url: str, *, field: str, default_port: int | None = None) -> list[IPAddress]:
    """``address_check`` of a URL's host and port."""
    parts = urlsplit(url)
    try:
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ConfigError(field, f"the port is not valid: {exc}") from None
    if not host:
        raise ConfigError(field, "must name a host")
    return address_check(host, port or default_port, field=field)
