"""Amazon Web Services and the services that speak their protocols (S3-compatible object
stores, Kinesis): the ``aws`` kind of named connection, and the endpoint, region and
credentials a source or sink of such a service is configured with."""

from connectors.aws.config import CONNECTION_KIND, AwsAddress, AwsTarget, validate_endpoint
from connectors.aws.session import aws_client, aws_error_reason
from source_support.connections import ConnectionKind, register_connection_kind

__all__ = ["AwsAddress", "AwsTarget", "aws_client", "aws_error_reason", "register"]


def register() -> None:
    """The entry point of the ``activedataflow.connectors`` group (``pyproject.toml``)."""
    register_connection_kind(
        ConnectionKind(
            type=CONNECTION_KIND,
            description=(
                "An AWS endpoint (https://s3.eu-west-1.amazonaws.com) or an S3/Kinesis-compatible "
                "server (http://minio:9000): the user is the access key id, the password its secret "
                "access key; key patterns limit buckets/keys (events/2026/*) or stream names."
            ),
            validate_url=validate_endpoint,
            default_port=443,
            pinnable_schemes=("http",),
        )
    )
