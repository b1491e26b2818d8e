"""The address policy: which hosts a user's webhook or connection may reach. Nothing here
connects; the resolver is the tests' offline one (tests/conftest.py) or a stand-in."""

from __future__ import annotations

import socket

import pytest

from source_support.addresses import (
    AddressAllowList,
    AddressRefused,
    checked_addresses,
    create_checked_connection,
)

NOTHING_ALLOWED = AddressAllowList()


@pytest.mark.parametrize(
    ("host", "what"),
    [
        ("169.254.169.254", "a link-local address"),
        ("10.0.0.1", "a private address"),
        ("::ffff:169.254.169.254", "a link-local address"),
        ("0x7f000001", "a loopback address"),
        ("2130706433", "a loopback address"),
        ("127.1", "a loopback address"),
        ("::1", "a loopback address"),
        ("0.0.0.0", "an unspecified address"),
        ("224.0.0.1", "a multicast address"),
        ("240.0.0.1", "a private address"),
        ("100.64.0.1", "not a global address"),
        ("fe80::1", "a link-local address"),
        ("fc00::1", "a private address"),
    ],
)
def test_internal_addresses_are_refused_in_every_spelling(host, what):
    with pytest.raises(AddressRefused) as refused:
        checked_addresses(host, 80, allowed=NOTHING_ALLOWED)

    assert what in str(refused.value)


def test_a_public_address_is_taken():
    assert [str(a) for a in checked_addresses("93.184.216.34", 443, allowed=NOTHING_ALLOWED)] == [
        "93.184.216.34"
    ]


@pytest.mark.parametrize(
    ("entries", "host"),
    [
        (["10.0.0.0/8"], "10.1.2.3"),
        (["127.0.0.1"], "0x7f000001"),
        (["localhost"], "localhost"),
        (["*.corp"], "a.corp"),
    ],
)
def test_the_allow_list_names_hosts_addresses_and_networks(entries, host, monkeypatch):
    def resolver(name, port, *args):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.9.9.9" if name == "a.corp" else name, port))]

    allowed = AddressAllowList.parse(entries)
    resolve = None if host in ("10.1.2.3", "0x7f000001", "localhost") else resolver

    assert checked_addresses(host, 80, allowed=allowed, resolver=resolve)


def test_a_bad_allow_list_entry_is_named():
    with pytest.raises(ValueError, match="'10.0.0.0/33 x'"):
        AddressAllowList.parse(["10.0.0.0/33 x"])


def test_a_name_resolving_to_any_internal_address_is_refused():
    def resolver(name, port, *args):
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.5", port)),
        ]

    with pytest.raises(AddressRefused, match=r"mixed.example \(10.0.0.5\) is a private address"):
        checked_addresses("mixed.example", 80, allowed=NOTHING_ALLOWED, resolver=resolver)


def test_the_checked_connection_connects_to_the_checked_address_only():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]

        def resolver(name, port, *args):  # a name the tests' DNS stand-in answers with loopback
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

        with pytest.raises(AddressRefused):
            create_checked_connection(("svc.example", port), 2, allowed=NOTHING_ALLOWED, resolver=resolver)
        allowed = AddressAllowList.parse(["127.0.0.1"])
        with create_checked_connection(("svc.example", port), 2, allowed=allowed, resolver=resolver) as sock:
            assert sock.getpeername() == ("127.0.0.1", port)
