"""Failed logins, counted per user name and per client address in Redis, so every web
process (gunicorn workers, several hosts) shares the count.

Every login (the API's token endpoint, the dashboard's and the admin's login pages) takes
an attempt first: ``login_attempt_begin`` refuses it, with the seconds to wait, when the
user name or the address has had its limit of failures within the window; otherwise it
counts the attempt as a failure until ``login_attempt_succeeded`` takes it back. Taking
first and giving back after makes concurrent guesses count: fifty parallel posts cannot all
pass a check made before any of them failed.

The windows slide: a failure counts for the window's length after it happened, and the
wait is until the oldest counted failure leaves the window.

Without Redis nothing can be counted, and a login is refused (``LoginThrottleUnavailable``,
a 503 with Retry-After) rather than let through unthrottled: failing open would make
guessing free for as long as Redis is away, which an attacker can help along.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import re
import time
import uuid
from dataclasses import dataclass

import redis
from django.conf import settings

from dataflow.redis_client import get_redis

logger = logging.getLogger(__name__)

#: "10/15m": 10 failures per 15 minutes; units s, m (or min), h (or hour), d (or day).
RATE_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*(s|sec|m|min|h|hour|d|day)\s*$")
UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}
#: IPv6 clients are counted per /64: one host is commonly given a whole /64 to pick from.
IPV6_PREFIX = 64
#: What a login refused for want of Redis is told to wait: long enough not to hammer a
#: Redis that is restarting, short enough for a person to wait.
UNAVAILABLE_RETRY_AFTER_S = 30

# Takes an attempt in every window at once, or none: KEYS are the windows' sorted sets;
# ARGV: now (ms), the attempt's member, then a (limit, window ms) pair per key. Answers 0
# (taken) or the milliseconds until the fullest window has room.
_BEGIN = """
local now = tonumber(ARGV[1])
local wait = 0
for i, key in ipairs(KEYS) do
  local limit = tonumber(ARGV[1 + 2 * i])
  local window = tonumber(ARGV[2 + 2 * i])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  if redis.call('ZCARD', key) >= limit then
    local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    local until_free = tonumber(oldest[2]) + window - now
    if until_free > wait then wait = until_free end
  end
end
if wait > 0 then return wait end
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, now, ARGV[2])
  redis.call('PEXPIRE', key, tonumber(ARGV[2 + 2 * i]))
end
return 0
"""


class LoginThrottleUnavailable(Exception):
    """Failed logins cannot be counted (Redis does not answer): the login is refused."""

    retry_after_s = UNAVAILABLE_RETRY_AFTER_S

    def __init__(self) -> None:
        super().__init__(
            "Logging in is unavailable for the moment: failed logins cannot be counted. "
            f"Try again in {self.retry_after_s} seconds."
        )


@dataclass(frozen=True)
class LoginRate:
    """At most ``failures`` failed logins within ``window_s`` seconds."""

    failures: int
    window_s: int


@dataclass(frozen=True)
class LoginAttempt:
    """A login under way: refused (``wait_s`` > 0) or counted until it succeeds."""

    username_key: str
    address_key: str
    member: str
    wait_s: int

    @property
    def refused(self) -> bool:
        return self.wait_s > 0


def login_rate_parse(text: str, *, setting: str) -> LoginRate:
    """``"10/15m"`` as a LoginRate; a ValueError naming ``setting`` for anything else."""
    match = RATE_RE.match(text or "")
    if match is None or int(match.group(1)) < 1:
        raise ValueError(f"{setting}: {text!r} is no rate; write failures/period, e.g. '10/15m' or '30/h'")
    count, length, unit = match.groups()
    return LoginRate(failures=int(count), window_s=int(length or 1) * UNIT_SECONDS[unit])


def client_address(*, remote_addr: str, forwarded_for: str, trusted_proxies: int) -> str:
    """The address a login came from: REMOTE_ADDR, or, behind ``trusted_proxies`` proxies
    that each append to X-Forwarded-For, the entry the farthest trusted proxy wrote. Entries
    left of it are the client's own and may be made up, so they are never used. IPv6
    addresses are reduced to their /64."""
    address = remote_addr
    if trusted_proxies > 0 and forwarded_for:
        hops = [hop.strip() for hop in forwarded_for.split(",") if hop.strip()]
        if hops:
            address = hops[-trusted_proxies] if len(hops) >= trusted_proxies else hops[0]
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return remote_addr or "unknown"
    if parsed.version == 4:
        return str(parsed)
    if parsed.ipv4_mapped is not None:  # ::ffff:10.0.0.1 is 10.0.0.1
        return str(parsed.ipv4_mapped)
    return str(ipaddress.ip_network(f"{parsed}/{IPV6_PREFIX}", strict=False))


def client_address_of(request) -> str:
    """``client_address`` of a Django request, as ``DATAFLOW_TRUSTED_PROXIES`` says."""
    return client_address(
        remote_addr=request.META.get("REMOTE_ADDR", ""),
        forwarded_for=request.META.get("HTTP_X_FORWARDED_FOR", ""),
        trusted_proxies=settings.DATAFLOW_TRUSTED_PROXIES,
    )


def _key(kind: str, value: str) -> str:
    # Hashed: a user name is typed by whoever posts; a key must not grow with it.
    digest = hashlib.sha256(value.encode()).hexdigest()[:32]
    return f"{settings.DATAFLOW_REDIS_NAMESPACE}:login-failures:{kind}:{digest}"


def login_attempt_begin(*, username: str, address: str) -> LoginAttempt:
    """Takes a login attempt for ``username`` from ``address``, counted as a failure in both
    windows until it succeeds; or refuses it with the seconds to wait when either window is
    full (nothing is counted then)."""
    username_rate = login_rate_parse(
        settings.DATAFLOW_LOGIN_USERNAME_RATE, setting="DATAFLOW_LOGIN_USERNAME_RATE"
    )
    address_rate = login_rate_parse(
        settings.DATAFLOW_LOGIN_ADDRESS_RATE, setting="DATAFLOW_LOGIN_ADDRESS_RATE"
    )
    username_key = _key("user", (username or "").strip().casefold())
    address_key = _key("address", address)
    member = uuid.uuid4().hex
    try:
        # As strings, as redis-py's eval is typed (it sends an int as the same digits).
        wait_ms = get_redis().eval(
            _BEGIN,
            2,
            username_key,
            address_key,
            str(int(time.time() * 1000)),
            member,
            str(username_rate.failures),
            str(username_rate.window_s * 1000),
            str(address_rate.failures),
            str(address_rate.window_s * 1000),
        )
    except redis.RedisError as error:
        logger.error("login refused: the login throttle cannot reach Redis (%s)", error)
        raise LoginThrottleUnavailable() from error
    # A Lua number comes back as an integer reply (redis-py types eval's reply as a string).
    assert isinstance(wait_ms, int)
    wait_s = -(-wait_ms // 1000)  # whole seconds, rounded up: Retry-After is in seconds
    return LoginAttempt(username_key=username_key, address_key=address_key, member=member, wait_s=wait_s)


def login_attempt_succeeded(*, attempt: LoginAttempt) -> None:
    """The attempt logged in: it is not a failure, and the user name's earlier failures are
    forgotten (whoever knows the password has nothing to guess). The address's other
    failures stay: an account of one's own must not buy guesses at others'.
    ``LoginThrottleUnavailable`` if Redis went away since the attempt began: the login is
    refused then too, as it would have been a moment earlier."""
    try:
        with get_redis().pipeline() as pipe:
            pipe.zrem(attempt.address_key, attempt.member)
            pipe.delete(attempt.username_key)
            pipe.execute()
    except redis.RedisError as error:
        logger.error("login refused: the login throttle cannot reach Redis (%s)", error)
        raise LoginThrottleUnavailable() from error


def login_refusal_text(*, wait_s: int) -> str:
    """What a refused login is told."""
    return f"Too many failed logins for this user name or from this address: try again in {wait_s} second(s)."
