"""Which network addresses a user's webhook or connection may reach.

Plain Python (webhooks, connection resolution and connectors all use it). A host is
resolved with ``getaddrinfo`` and refused when any address it resolves to is loopback,
private, link-local, multicast, reserved, unspecified or otherwise not global, unless an
allow-list names the host, the address, or a network holding it. IPv4-mapped IPv6
addresses (``::ffff:169.254.169.254``) are judged as the IPv4 address they carry, and
numeric forms such as ``0x7f000001`` or ``2130706433`` are judged as what the resolver
makes of them (127.0.0.1), never by their spelling.

Checking a name and then connecting by name would let a DNS server answer a public address
to the check and a private one to the connect (DNS rebinding), so callers connect to the
address the check returned (``checked_addresses``, ``create_checked_connection``).
"""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
#: One answer of ``socket.getaddrinfo``: family, type, protocol, canonical name, address.
AddrInfo = tuple[
    socket.AddressFamily,
    socket.SocketKind,
    int,
    str,
    tuple[str, int] | tuple[str, int, int, int] | tuple[int, bytes],
]
#: ``socket.getaddrinfo``'s signature, as it is called here (host, port, family, type).
Resolver = Callable[[str, int | None, int, int], list[AddrInfo]]
#: The resolver used when a caller passes none: the test suite replaces it with one that
#: sends no query over the network (it resolves only numeric hosts and names it is given).
getaddrinfo: Resolver = socket.getaddrinfo


class AddressRefused(ValueError):
    """A host resolves to an address that may not be contacted; the message says which and why."""


@dataclass(frozen=True)
class AddressAllowList:
    """Hosts (exact names or globs such as ``*.corp.example``), addresses and networks
    (CIDRs) that may be contacted although they are internal."""

    hosts: tuple[str, ...] = ()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AddressAllowList:
        """The allow-list of setting entries: an IP address, a CIDR, or a host name
        (a glob); a ValueError names an entry that is none of these."""
        hosts: list[str] = []
        networks: list[IPNetwork] = []
        for entry in entries:
            entry = entry.strip().lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                if any(c in entry for c in "/ ") or not entry.strip("*."):
                    raise ValueError(f"{entry!r} is not a host name, an IP address or a CIDR") from None
                hosts.append(entry)
        return cls(tuple(hosts), tuple(networks))

    def names_host(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return any(fnmatch.fnmatchcase(host, pattern) for pattern in self.hosts)

    def holds(self, address: IPAddress) -> bool:
        return any(address in network for network in self.networks)


def internal_reason(address: IPAddress) -> str:
    """What ``address`` is if it is internal (``"a loopback address"``...), or "" if it is
    a global unicast address that may be contacted."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return internal_reason(address.ipv4_mapped)
    for reason, internal in (
        ("an unspecified address", address.is_unspecified),
        ("a loopback address", address.is_loopback),
        ("a link-local address", address.is_link_local),
        ("a multicast address", address.is_multicast),
        ("a private address", address.is_private),
        ("a reserved address", address.is_reserved),
    ):
        if internal:
            return reason
    if not address.is_global:  # shared (100.64/10), 6to4 of a private address, ...
        return "not a global address"
    return ""


def checked_addresses(
    host: str,
    port: int | None,
    *,
    allowed: AddressAllowList,
    resolver: Resolver | None = None,
) -> list[IPAddress]:
    """The addresses ``host`` resolves to, every one of them checked; AddressRefused if
    the host cannot be resolved or any address is internal and not allowed. A name the
    allow-list names is not checked (its addresses are returned as resolved)."""
    bare = host.strip("[]")
    try:
        infos = (resolver or getaddrinfo)(bare, port, 0, socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise AddressRefused(f"{host} cannot be resolved: {exc}") from None
    addresses: list[IPAddress] = []
    for info in infos:
        # The scope of a link-local IPv6 address ("fe80::1%eth0") is not part of the address.
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise AddressRefused(f"{host} resolves to no address")
    if allowed.names_host(bare):
        return addresses
    for address in addresses:
        reason = internal_reason(address)
        if reason and not allowed.holds(address):
            shown = host if _same_address(bare, address) else f"{host} ({address})"
            raise AddressRefused(
                f"{shown} is {reason}: not contacted unless DATAFLOW_ALLOWED_INTERNAL_ADDRESSES names it"
            )
    return addresses


def _same_address(host: str, address: IPAddress) -> bool:
    try:
        return ipaddress.ip_address(host) == address
    except ValueError:
        return False


def create_checked_connection(
    address: tuple[str, int],
    timeout: float | None = None,
    source_address: tuple[str, int] | None = None,
    *,
    allowed: AddressAllowList,
    resolver: Resolver | None = None,
) -> socket.socket:
    """``socket.create_connection`` that resolves and checks the host itself and connects
    only to an address it checked (against DNS rebinding); AddressRefused otherwise."""
    host, port = address
    errors: list[str] = []
    for ip in checked_addresses(host, port, allowed=allowed, resolver=resolver):
        try:
            return socket.create_connection((str(ip), port), timeout, source_address)
        except OSError as exc:
            errors.append(f"{ip}: {exc}")
    raise OSError(f"could not connect to {host}:{port} ({'; '.join(errors)})")
