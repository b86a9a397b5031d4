"""The Python client of the ferryman HTTP API: ``Client`` (sync) and ``AsyncClient``.

Both have the same methods (submit, submit_many, get, list, iter_jobs, events, cancel,
wait, wait_many, as_completed, result) and return typed models
(``ferryman.client.models``). Importing this package never imports the server: it
needs only httpx and pydantic.
"""

from __future__ import annotations

from ferryman.client.async_client import AsyncClient
from ferryman.client.errors import (
    ClientError,
    JobCancelledError,
    JobFailedError,
    UnreachableError,
    WaitTimeoutError,
)
from ferryman.client.models import (
    Attempt,
    BatchProblem,
    Event,
    FailureClass,
    Job,
    JobFailure,
    JobHistory,
    JobStatus,
    Page,
    ResultFailure,
    SubmitItem,
    Submitted,
)
from ferryman.client.retrying import DEFAULT_RETRY_BUDGET_SECONDS, RetryNotice, retry_after_seconds
from ferryman.client.sync_client import Client

__all__ = [
    "DEFAULT_RETRY_BUDGET_SECONDS",
    "AsyncClient",
    "Attempt",
    "BatchProblem",
    "Client",
    "ClientError",
    "Event",
    "FailureClass",
    "Job",
    "JobCancelledError",
    "JobFailedError",
    "JobFailure",
    "JobHistory",
    "JobStatus",
    "Page",
    "ResultFailure",
    "RetryNotice",
    "SubmitItem",
    "Submitted",
    "UnreachableError",
    "WaitTimeoutError",
    "retry_after_seconds",
]
