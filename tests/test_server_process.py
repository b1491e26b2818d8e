"""``free_port`` (tests/server_process.py): ports of this pytest-xdist worker's own, never
an ephemeral port that a process binding port 0 (a Spark driver's accumulator server) could
take between the probe and the test's use of it."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.server_process import PORT_SPAN, free_port, port_range
from tests.worker_env import REDIS_DATABASES, worker_number


def ephemeral_ports() -> range:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return range(int(low), int(high) + 1)


def test_each_worker_has_its_own_ports_below_the_ephemeral_range():
    ranges = [port_range(n) for n in range(REDIS_DATABASES)]
    ephemeral = ephemeral_ports()
    for number, ports in enumerate(ranges):
        assert len(ports) == PORT_SPAN
        assert ports.stop <= ephemeral.start, f"gw{number}'s ports reach the ephemeral range"
        for other in ranges[number + 1 :]:
            assert ports.stop <= other.start
    assert port_range(None) == port_range(0)


def test_free_ports_are_this_workers_and_never_handed_out_twice():
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(port in port_range(worker_number()) for port in ports)


def test_a_port_something_holds_is_skipped():
    port = free_port()
    mine = port_range(worker_number())
    following = mine[(mine.index(port) + 1) % len(mine)]
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", following))  # held (not listening): no server could bind it
        assert free_port() != following
