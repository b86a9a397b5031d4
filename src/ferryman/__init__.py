"""ferryman: durable jobs for slow, costly foundation-model calls.

The public Python API is the HTTP client (``Client``, ``AsyncClient``, the models
they return and the errors they raise); everything else is reached through the HTTP
API or the ``ferryman`` command. Importing ``ferryman`` never imports the server.
"""

from __future__ import annotations

from ferryman.client import (
    AsyncClient,
    Attempt,
    BatchProblem,
    Client,
    ClientError,
    Event,
    Job,
    JobCancelledError,
    JobFailedError,
    JobHistory,
    JobStatus,
    Page,
    SubmitItem,
    Submitted,
    UnreachableError,
    WaitTimeoutError,
)

__all__ = [
    "AsyncClient",
    "Attempt",
    "BatchProblem",
    "Client",
    "ClientError",
    "Event",
    "Job",
    "JobCancelledError",
    "JobFailedError",
    "JobHistory",
    "JobStatus",
    "Page",
    "SubmitItem",
    "Submitted",
    "UnreachableError",
    "WaitTimeoutError",
]
__version__ = "0.1.0"
