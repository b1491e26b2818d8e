"""boto3 clients made from an ``AwsTarget``, and the short reason an AWS call failed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, overload

import boto3
import botocore.exceptions
from botocore.config import Config

from connectors.aws.config import AwsTarget

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_s3 import S3Client

CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 30
#: botocore's own retries (standard mode: throttling and 5xx, with backoff) before a call fails.
MAX_ATTEMPTS = 4
#: Error codes that say the key pair is wrong, whatever the service.
CREDENTIAL_CODES = frozenset(
    {
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidClientTokenId",
    }
)


@overload
def aws_client(target: AwsTarget, service: Literal["s3"], *, max_attempts: int | None = None) -> S3Client: ...
@overload
def aws_client(
    target: AwsTarget, service: Literal["kinesis"], *, max_attempts: int | None = None
) -> KinesisClient: ...
def aws_client(
    target: AwsTarget, service: Literal["s3", "kinesis"], *, max_attempts: int | None = None
) -> S3Client | KinesisClient:
    """A client of ``service`` at the target's endpoint with its key pair (the process's
    standard AWS credentials when it has none). An S3 client at a custom endpoint addresses
    buckets by path (http://host:9000/bucket/key), which every S3-compatible server takes.
    ``max_attempts``: botocore's tries of a call (1: a caller that backs off by itself;
    None: ``MAX_ATTEMPTS``, read at each call)."""
    if max_attempts is None:
        max_attempts = MAX_ATTEMPTS
    config = Config(
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
        retries={"max_attempts": max_attempts, "mode": "standard"},
        s3={"addressing_style": "path" if target.endpoint_url else "auto"},
    )
    session = boto3.session.Session(
        aws_access_key_id=target.access_key_id,
        aws_secret_access_key=target.secret_access_key,
        region_name=target.region,
    )
    return session.client(service, endpoint_url=target.endpoint_url, config=config)  # pyright: ignore[reportUnknownMemberType, reportCallIssue, reportArgumentType]


def error_code(exc: BaseException) -> str:
    """The service's error code of a failed call (``NoSuchKey``), else empty."""
    if isinstance(exc, botocore.exceptions.ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def is_credential_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the key pair is wrong or missing."""
    return isinstance(exc, botocore.exceptions.NoCredentialsError) or error_code(exc) in CREDENTIAL_CODES


def aws_error_reason(exc: BaseException) -> str:
    """A short reason for a failed call that names no secret: the service's error code and
    message, or what kept the endpoint from answering."""
    if isinstance(exc, botocore.exceptions.NoCredentialsError):
        return "no credentials: give access_key_id and secret_access_key, or name a connection"
    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        code = error.get("Code", "")
        if code in CREDENTIAL_CODES:
            return f"the credentials were refused ({code}): check access_key_id and secret_access_key"
        return f"{code}: {error.get('Message', '')}".rstrip(": ")
    if isinstance(exc, botocore.exceptions.EndpointConnectionError | botocore.exceptions.ConnectTimeoutError):
        return "the endpoint does not answer"
    if isinstance(exc, botocore.exceptions.ReadTimeoutError):
        return f"no answer within {READ_TIMEOUT_S} s"
    if isinstance(exc, botocore.exceptions.BotoCoreError):
        return type(exc).__name__
    return str(exc) or type(exc).__name__


#: What a call may raise when the endpoint is away or refuses it (callers catch these).
AWS_ERRORS: tuple[type[BaseException], ...] = (
    botocore.exceptions.BotoCoreError,
    botocore.exceptions.ClientError,
)
