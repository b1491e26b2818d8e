"""The errors service functions raise besides ``ConfigError`` (a refused spec or option,
``source_support.errors``). Their own module, so that raising one imports nothing else."""

from __future__ import annotations


class FlowStateError(RuntimeError):
    """The flow is not in a state that allows the action (e.g. starting a running flow)."""


class FlowExistsError(FlowStateError):
    """A flow of that name exists already (answered 409, as a state refusal)."""


class QuotaExceeded(FlowStateError):
    """The owner's quota ``quota`` (a key of ``DATAFLOW_USER_QUOTAS``) does not allow the
    action (answered 403 naming the quota)."""

    def __init__(self, quota: str, message: str) -> None:
        super().__init__(message)
        self.quota = quota


class TooManyAtOnce(RuntimeError):
    """The user runs as many of these (previews, connection tests) as they may at once
    (answered 429 with Retry-After)."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
