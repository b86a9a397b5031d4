"""JobQueue: at-least-once delivery of job messages, with SQS semantics.

A received message is hidden for its visibility timeout and then delivered again
unless deleted. Each receive counts; a message received more than ``max_receives``
times moves to the dead-letter queue instead of being delivered (redrive).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ferryman.core.job import PAYLOAD_VERSION

if TYPE_CHECKING:
    from ferryman.core.job import Job


@dataclass(frozen=True, slots=True)
class QueueMessage:
    """What travels on the queue: the job's identity, never its input."""

    job_id: str
    tenant_id: str
    payload_version: int = PAYLOAD_VERSION
    traceparent: str | None = None
    correlation_id: str | None = None

    @classmethod
    def for_job(cls, job: Job) -> QueueMessage:
        return cls(
            job_id=job.job_id,
            tenant_id=job.tenant_id,
            payload_version=job.payload_version,
            traceparent=job.traceparent,
            correlation_id=job.correlation_id,
        )

    def to_body(self) -> str:
        return json.dumps(
            {
                "job_id": self.job_id,
                "tenant_id": self.tenant_id,
                "payload_version": self.payload_version,
                "traceparent": self.traceparent,
                "correlation_id": self.correlation_id,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_body(cls, body: str) -> QueueMessage:
        """Raises ValueError on a body that is not a job message."""
        data = json.loads(body)
        if not isinstance(data, dict) or not isinstance(data.get("job_id"), str):
            raise ValueError("not a job message")
        return cls(
            job_id=data["job_id"],
            tenant_id=str(data.get("tenant_id", "")),
            payload_version=int(data.get("payload_version", 0)),
            traceparent=data.get("traceparent"),
            correlation_id=data.get("correlation_id"),
        )


@dataclass(frozen=True, slots=True)
class Delivery:
    """One receive of a message. The receipt is valid for this receive only."""

    message: QueueMessage
    receipt: str
    receive_count: int
    sent_at: float


@dataclass(frozen=True, slots=True)
class DeadLetter:
    dead_letter_id: str
    message: QueueMessage
    receive_count: int
    dead_lettered_at: float


@dataclass(frozen=True, slots=True)
class QueueStats:
    visible: int
    in_flight: int  # received and hidden, or delayed
    oldest_age_seconds: float  # age of the oldest message not yet deleted, 0 if none
    dead_letters: int


class JobQueue(Protocol):
    async def send(self, message: QueueMessage, *, delay_seconds: float = 0.0) -> None: ...

    async def receive(
        self, *, max_messages: int, visibility_timeout_seconds: float, wait_seconds: float = 0.0
    ) -> list[Delivery]:
        """Up to max_messages visible messages, oldest first, each hidden for the
        timeout and its receive count raised. Waits up to wait_seconds for one."""
        ...

    async def change_visibility(self, receipt: str, *, timeout_seconds: float) -> bool:
        """Hide (or show, with 0) the received message for timeout_seconds from now.
        False when the receipt is stale (the message was received again or deleted)."""
        ...

    async def delete(self, receipt: str) -> None:
        """Acknowledge. Deleting an already deleted message is not an error."""
        ...

    async def receive_dead_letters(self, *, max_messages: int) -> list[DeadLetter]: ...

    async def delete_dead_letter(self, dead_letter_id: str) -> None: ...

    async def stats(self) -> QueueStats: ...
