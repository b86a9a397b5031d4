"""SDK errors at the adapter boundary: an outage becomes StoreUnavailableError.

What says AWS cannot serve us now is translated: a connection that failed or timed
out, throttling that outlived botocore's retries, a 5xx, credentials that expired or
cannot be found. A programming error (a malformed request, a missing table the
operator must create with ``ferryman migrate``) says what it is: the first is a bug,
the second a message naming the command. A condition that did not hold is never an
error here: each adapter reads it where it expects it.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from ferryman.core.errors import ResultsUnavailableError, StoreUnavailableError

if TYPE_CHECKING:
    from collections.abc import Iterator

# Error codes that are the service's state, not our request's fault.
_OUTAGE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "Throttling",
        "ThrottledException",
        "SlowDown",
        "InternalServerError",
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "TransactionInProgressException",
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
        "KMS.ThrottlingException",
        "AWS.SimpleQueueService.ServiceUnavailable",
        "RequestThrottled",
    }
)
# A table, queue or bucket that is not there: the operator has not run migrate.
MISSING_CODES = frozenset(
    {
        "ResourceNotFoundException",
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueDoesNotExist",
        "NoSuchBucket",
    }
)


def error_code(exc: BaseException) -> str | None:
    """The AWS error code of a ClientError (None for anything else)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    error = response.get("Error")
    code = error.get("Code") if isinstance(error, dict) else None
    return str(code) if code is not None else None


def is_outage(exc: BaseException) -> bool:
    from botocore import exceptions as boto

    if isinstance(
        exc,
        boto.EndpointConnectionError
        | boto.ConnectionClosedError
        | boto.ReadTimeoutError
        | boto.ConnectTimeoutError
        | boto.NoCredentialsError
        | boto.PartialCredentialsError
        | boto.CredentialRetrievalError
        | boto.HTTPClientError,
    ):
        return True
    if isinstance(exc, OSError | TimeoutError):
        return True
    code = error_code(exc)
    if code is None:
        return False
    if code in _OUTAGE_CODES or code in MISSING_CODES:
        return True
    status = _status(exc)
    return status is not None and status >= 500


def _status(exc: BaseException) -> int | None:
    response: Any = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status if isinstance(status, int) else None


def describe(exc: BaseException, service: str) -> str:
    """One line for logs and errors: the service, the error code and AWS's message
    (which names resources and limits, never item values)."""
    code = error_code(exc)
    if code is not None:
        message = str(getattr(exc, "response", {}).get("Error", {}).get("Message", ""))
        hint = " (run `ferryman migrate` on this aws:// URL)" if code in MISSING_CODES else ""
        return f"{service}: {code}: {message.strip()}{hint}".rstrip(": ")
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{service}: {type(exc).__name__}: {first}".rstrip(": ")


@contextlib.contextmanager
def translate_errors(service: str) -> Iterator[None]:
    """Raise StoreUnavailableError from an outage of ``service``; let the rest through."""
    try:
        yield
    except Exception as exc:
        if not is_outage(exc):
            raise
        error = StoreUnavailableError(describe(exc, service))
        raise error from exc


@contextlib.contextmanager
def translate_result_errors() -> Iterator[None]:
    """As translate_errors, for S3 results: ResultsUnavailableError."""
    try:
        yield
    except Exception as exc:
        if not is_outage(exc):
            raise
        raise ResultsUnavailableError(describe(exc, "s3")) from exc
