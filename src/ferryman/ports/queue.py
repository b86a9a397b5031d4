"""JobQueue: at-least-once delivery of job messages, with SQS semantics.

A received message is hidden for its visibility timeout and then delivered again
unless deleted. Each receive counts; a message received more than ``max_receives``
times moves to the dead-letter queue instead of being delivered (redrive). A message
no worker could ever read (its body is not a job message) moves there at once, with
the reason, so it never blocks the messages behind it.

Every engine gives a tenant no more deliveries than the receiver's ``TenantBudget``
allows. Where the engine says so (``QueueCapabilities.fair_receive``: SQLite,
PostgreSQL and memory), receives are also fair by themselves: visible messages are
taken round-robin across tenants, the tenant with the fewest deliveries in flight
first, each tenant's in the order they became visible (so a retry that comes due goes
behind work that was waiting before it, not back to the head of the line). An engine
that cannot (SQS delivers in its own order) is fair only by the receiver's cap.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ferryman.core.job import PAYLOAD_VERSION

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Mapping

    from ferryman.core.changes import Change
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
        """Raises ValueError on a body that is not a job message.

        A body with an unknown payload_version still decodes: whether a worker
        understands it is the worker's question (it leaves it for one that does)."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise ValueError("not JSON") from exc
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        job_id, tenant_id, version = (
            data.get("job_id"),
            data.get("tenant_id", ""),
            data.get("payload_version", 0),
        )
        if not isinstance(job_id, str) or not job_id or not isinstance(tenant_id, str):
            raise ValueError("no job_id or tenant_id")
        if not isinstance(version, int) or isinstance(version, bool):
            raise ValueError("payload_version is not an integer")
        traceparent, correlation_id = data.get("traceparent"), data.get("correlation_id")
        return cls(
            job_id=job_id,
            tenant_id=tenant_id,
            payload_version=version,
            traceparent=traceparent if isinstance(traceparent, str) else None,
            correlation_id=correlation_id if isinstance(correlation_id, str) else None,
        )


@dataclass(frozen=True, slots=True)
class Delivery:
    """One receive of a message. The receipt is valid for this receive only."""

    message: QueueMessage
    receipt: str
    receive_count: int
    sent_at: float
    # Epoch seconds: the latest moment this receipt's message can be kept hidden to
    # (``change_visibility`` clamps to it). SQS caps a receive's visibility at 12 hours;
    # a worker does not start an attempt that cannot finish before it. None: no limit.
    extendable_until: float | None = None


class DeadLetterReason(enum.StrEnum):
    MAX_RECEIVES = "max_receives"  # received too often without being deleted
    UNDECODABLE = "undecodable"  # no worker can ever read it


@dataclass(frozen=True, slots=True)
class DeadLetter:
    dead_letter_id: str
    message: QueueMessage
    receive_count: int
    dead_lettered_at: float
    reason: DeadLetterReason = DeadLetterReason.MAX_RECEIVES


@dataclass(frozen=True, slots=True)
class UndecodableLetter:
    """A dead letter whose body no worker can read (``DeadLetterReason.UNDECODABLE``):
    it names no job for the sweeper to fail, so it waits in the dead-letter queue for
    an operator to read and purge. ``body`` is as it was sent."""

    dead_letter_id: str
    body: str
    sent_at: float
    dead_lettered_at: float
    receive_count: int


@dataclass(frozen=True, slots=True)
class TenantBudget:
    """How many deliveries one receiver lets each tenant hold at once.

    ``in_flight`` is the receiver's live count per tenant, read at every look. A
    receive that found every waiting tenant at its share looks again when ``freed``
    is set (the receiver sets it as a tenant at its share lets a delivery go), not
    only when a message is sent or its poll comes round: otherwise a worker whose
    one busy tenant holds its share idles its other slots until the next poll.
    """

    max_per_tenant: int
    in_flight: Mapping[str, int]
    freed: asyncio.Event | None = None

    def allowance(self, tenant_id: str) -> int:
        return max(0, self.max_per_tenant - self.in_flight.get(tenant_id, 0))

    def held(self, tenant_id: str) -> int:
        return self.in_flight.get(tenant_id, 0)


@dataclass(frozen=True, slots=True)
class QueueCapabilities:
    """What may differ between engines' queues, as each engine states it (held by
    tests/contract/test_capabilities.py)."""

    # True: ``receive`` itself takes tenants in turn (module docstring), so one tenant's
    # backlog never delays another's, with or without a budget. False: the engine
    # delivers in its own order, and receives are fair only by the receiver's own
    # per-tenant in-flight cap (its TenantBudget): a receiver must pass one.
    fair_receive: bool
    # True: visibility timeouts, delays and send times follow the Clock the engine was
    # opened with (a FakeClock moves them in tests). False: the service keeps its own
    # time (SQS), so they pass in real seconds, whole ones, whatever the Clock says.
    follows_clock: bool = True


@dataclass(frozen=True, slots=True)
class QueueStats:
    visible: int
    in_flight: int  # received and hidden, or delayed
    oldest_age_seconds: float  # age of the oldest message not yet deleted, 0 if none
    dead_letters: int
    # Of those, the letters whose body names no job (UndecodableLetter).
    undecodable_letters: int = 0


class JobQueue(Protocol):
    @property
    def capabilities(self) -> QueueCapabilities:
        """What this engine promises where engines differ (QueueCapabilities)."""
        ...

    async def send(self, message: QueueMessage, *, delay_seconds: float = 0.0) -> None: ...

    async def receive(
        self,
        *,
        max_messages: int,
        visibility_timeout_seconds: float,
        wait_seconds: float = 0.0,
        budget: TenantBudget | None = None,
    ) -> list[Delivery]:
        """Up to max_messages visible messages, within the budget and, where
        ``capabilities.fair_receive``, fairly across tenants (module docstring),
        each hidden for the timeout and its receive count raised. Waits up to
        wait_seconds for one."""
        ...

    async def change_visibility(self, receipt: str, *, timeout_seconds: float) -> bool:
        """Hide (or show, with 0) the received message for timeout_seconds from now,
        but never past its delivery's ``extendable_until`` (hidden until then instead).
        False when the receipt is stale (the message was received again or deleted), or
        when ``extendable_until`` has passed and it cannot be hidden any longer."""
        ...

    async def delete(self, receipt: str) -> None:
        """Acknowledge. Deleting an already deleted message is not an error."""
        ...

    async def receive_dead_letters(self, *, max_messages: int) -> list[DeadLetter]:
        """The oldest dead letters of job messages (an undecodable one stays in the
        dead-letter queue for an operator: it names no job to fail)."""
        ...

    async def delete_dead_letter(self, dead_letter_id: str) -> None: ...

    async def undecodable_letters(
        self, *, limit: int, after: tuple[float, str] | None = None
    ) -> list[UndecodableLetter]:
        """Dead letters whose body names no job, in the order they were dead-lettered
        (``dead_lettered_at``, then ``dead_letter_id``); ``after``: that pair of the
        last one already seen."""
        ...

    async def undecodable_letter(self, dead_letter_id: str) -> UndecodableLetter | None:
        """One of them, or None (no such letter, or a job's: the sweeper's)."""
        ...

    async def delete_undecodable_letter(self, dead_letter_id: str) -> bool:
        """Purge one of them; False when there is no undecodable letter of that id (a
        job's dead letter is never purged here: its job must be failed first)."""
        ...

    async def stats(self) -> QueueStats: ...

    async def any_visible(self) -> bool:
        """Is any message, of any tenant, visible now? One cheap look, stale as soon as
        it returns: a worker asks it to decide whether to wait a moment before its next
        receive (services/worker.py), never to decide what to deliver."""
        ...


@dataclass(frozen=True, slots=True)
class Received:
    """One delivery of ``ClaimsOnReceive.receive_claiming``, with its job as the
    receive's own transaction read it (None: no such job), and the claim that
    transaction wrote for it (None: nothing was written to the job). ``read`` False:
    the job could not be read there (a row this version cannot decode, a payload it
    does not know); the delivery is handled as a plain one, which reads it again, so
    one bad row fails its own delivery only and never the receive of the others."""

    delivery: Delivery
    job: Job | None
    claim: Change | None
    read: bool = True

    @property
    def job_after(self) -> Job | None:
        """The job as this receive left it: after its claim, or as read."""
        return self.job if self.claim is None else self.claim.after


@runtime_checkable
class ClaimsOnReceive(Protocol):
    """Optional, beside JobQueue: an engine whose queue lives in the database of its
    jobs reads a received message's job and writes its claim in the transaction of the
    receive itself.

    A delivery that arrives alone then costs the engine's writer one transaction
    (one commit, one fsync) instead of a receive, a read and a claim. Every rule
    stays where it was: the receive counts, hides and dead-letters as ``receive``
    does and is fair between tenants under the same budget; the claim is the change
    the caller's ``decide`` made from core's rule for the job as read, written only
    if the job still has that change's expected revision (as ``JobStore.apply``);
    a delivery ``decide`` wrote nothing for goes to the caller with its job as read,
    to be handled as a plain delivery (duplicates recorded, retries deferred, ...).
    An engine without it (or whose ``claims_on_receive`` is False) keeps the three
    steps, which is what services/worker.py falls back to."""

    @property
    def claims_on_receive(self) -> bool: ...

    async def receive_claiming(
        self,
        *,
        max_messages: int,
        visibility_timeout_seconds: float,
        decide: Callable[[Delivery, Job | None], Change | None],
        wait_seconds: float = 0.0,
        budget: TenantBudget | None = None,
    ) -> list[Received]:
        """``receive``; and in its transaction, for each delivery, the job read and
        ``decide``'s claim written if the job's revision is still the one it expects
        (a claim whose revision moved is dropped: ``claim`` None, the job as read).
        The call returns after the commit: a claim is durable when it returns, as
        ``JobStore.apply``'s is.

        ``decide`` runs on the engine's writer, not the event loop, and may run more
        than once for one receive (an undone transaction is run again): it must be
        a pure decision that neither blocks nor changes anything itself."""
        ...
