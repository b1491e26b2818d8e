"""Where an AWS-protocol source or sink connects: a named connection, or an endpoint, a
region and credentials typed in the config (staff and the operator only: the spec layer
requires a connection of everyone else, so nobody borrows the service's own credentials).

Nothing here connects: a flow may be defined before its endpoint is up."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Self
from urllib.parse import unquote, urlsplit, urlunsplit

from source_support.config import ConfigBase, connection_field, option
from source_support.errors import ConfigError
from source_support.registry import Environment

#: The kind of named connection ``endpoint_url`` and the credentials may be replaced by.
CONNECTION_KIND = "aws"
DEFAULT_REGION = "us-east-1"


class AwsAddress(ConfigBase):
    """The endpoint, region and credentials of an AWS-protocol source or sink."""

    connection: str | None = connection_field(CONNECTION_KIND)
    endpoint_url: str | None = option(
        "The service's endpoint, such as http://127.0.0.1:9000 for an S3-compatible server; left "
        "out: AWS itself. For staff and the operator only (others name a connection).",
        default=None,
        example="http://127.0.0.1:9000",
        address=CONNECTION_KIND,
    )
    region: str = option("The AWS region.", default=DEFAULT_REGION, example="eu-west-1")
    access_key_id: str | None = option(
        "The access key id; left out with its secret: the standard AWS environment variables or "
        "profile of the process (staff and the operator only).",
        default=None,
        secret="value",
    )
    secret_access_key: str | None = option(
        "The secret access key of access_key_id.", default=None, secret="value"
    )

    def validate(self, env: Environment) -> Self:
        section = self.SECTION
        if self.connection is not None:
            if not self.connection.strip():
                raise ConfigError(f"{section}.connection", "must name a connection")
            for name in ("endpoint_url", "access_key_id", "secret_access_key"):
                if getattr(self, name) is not None:
                    raise ConfigError(
                        f"{section}.{name}",
                        f"comes from connection {self.connection!r}: give one or the other, not both",
                    )
            return self
        if (self.access_key_id is None) != (self.secret_access_key is None):
            missing = "secret_access_key" if self.secret_access_key is None else "access_key_id"
            raise ConfigError(f"{section}.{missing}", "is required with the other half of the key pair")
        if self.endpoint_url is None:
            return self
        return replace(self, endpoint_url=validate_endpoint(self.endpoint_url, f"{section}.endpoint_url"))


def validate_endpoint(url: str, field: str) -> str:
    """``url`` if it is an http(s) endpoint with a host; else a ConfigError naming ``field``."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(field, f"{_shown(url)!r} is not an endpoint URL (http://host:port or https://host)")
    if parts.query or parts.fragment:
        raise ConfigError(field, "an endpoint URL takes no query or fragment")
    try:
        _ = parts.port
    except ValueError:
        raise ConfigError(field, f"{_shown(url)!r} has a bad port") from None
    return url.strip()


def _shown(url: str) -> str:
    """``url`` without its user part (which may hold a key)."""
    parts = urlsplit(url.strip())
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


@dataclass(frozen=True)
class AwsTarget:
    """What a client is made from: the endpoint (None: AWS), the region, the key pair (None:
    the process's standard AWS credentials) and the key patterns its connection allows."""

    endpoint_url: str | None
    region: str
    access_key_id: str | None = None
    secret_access_key: str | None = None
    key_patterns: tuple[str, ...] = ()
    #: The field an error of the endpoint is reported on.
    field: str = "source.endpoint_url"

    @property
    def shown_endpoint(self) -> str:
        return self.endpoint_url or f"AWS ({self.region})"


def aws_target(config: AwsAddress, env: Environment) -> AwsTarget:
    """The endpoint and credentials ``config`` connects with, its named connection resolved:
    the connection's URL is the endpoint, its user the access key id and its password the
    secret key."""
    section = config.SECTION
    if config.connection is None:
        return AwsTarget(
            endpoint_url=config.endpoint_url,
            region=config.region,
            access_key_id=config.access_key_id,
            secret_access_key=config.secret_access_key,
            field=f"{section}.endpoint_url",
        )
    target = env.connection(config.connection, f"{section}.connection")
    parts = urlsplit(target.url)
    endpoint = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    return AwsTarget(
        endpoint_url=endpoint,
        region=config.region,
        access_key_id=unquote(parts.username) if parts.username else None,
        secret_access_key=unquote(parts.password) if parts.password else None,
        key_patterns=target.key_patterns,
        field=f"{section}.connection",
    )
