"""Completion webhooks: each owed notification delivered at least once, signed.

The change that finishes a job with a ``webhook_url`` writes the debt on the job in
the same transaction (core/changes.py), so a crash anywhere after it loses nothing:
some dispatcher finds it due (``JobUpkeep.webhooks_due``), claims it for one attempt
(a conditional write that makes it not due for ``CLAIM_SECONDS``), sends it, and
records the attempt as a WEBHOOK_DELIVERED or WEBHOOK_FAILED event with the next
attempt's time (core/webhooks.py's schedule). A dispatcher that dies mid-attempt leaves
the claim to expire; the next one sends the same ``webhook-id`` again. Receivers must
therefore expect a notification more than once, as the standard says.

Isolation: each attempt runs as its own task, at most ``max_in_flight`` at once and at
most ``max_in_flight_per_tenant`` for one tenant; a tenant at its share is left out of
the scan, so a slow or dead receiver holds only its own tenant's deliveries and never
a worker's slot, a heartbeat or another tenant's notification.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from ferryman.core import webhooks as rules
from ferryman.core.errors import (
    BackendUnavailableError,
    FerrymanError,
    JobNotFoundError,
    WebhookSecretUnreadableError,
)
from ferryman.observability.logging import describe_exception
from ferryman.ports.webhooks import StoredSecret
from ferryman.services.observers import JobObserver

if TYPE_CHECKING:
    from collections.abc import Callable

    from ferryman.core.changes import Change
    from ferryman.core.clock import Clock
    from ferryman.core.job import Job
    from ferryman.ports.store import JobUpkeep
    from ferryman.ports.webhooks import SecretSealer, WebhookSecretStore, WebhookSender
    from ferryman.services.jobs import JobQueries, JobView
    from ferryman.services.ledger import JobLedger

log = structlog.get_logger("ferryman.webhooks")

# After a rotation the replaced secret keeps signing beside the new one this long, so
# receivers can switch without missing a notification.
PREVIOUS_SECRET_SECONDS = 24 * 3600


@dataclass(frozen=True, slots=True)
class DispatchOptions:
    schedule: tuple[float, ...] = rules.DEFAULT_RETRY_SCHEDULE
    # How often a dispatcher looks for due notifications when nothing kicks it: the
    # latency of a first attempt for a job finished by another process, and of retries.
    poll_seconds: float = 1.0
    max_in_flight: int = 64
    max_in_flight_per_tenant: int = 4
    claim_seconds: float = rules.CLAIM_SECONDS


class WebhookSecrets:
    """Each tenant's signing secrets: created or rotated on request, read to sign."""

    def __init__(
        self,
        *,
        store: WebhookSecretStore,
        sealer: SecretSealer,
        clock: Clock,
        new_secret: Callable[[], str],
    ) -> None:
        self._store = store
        self._sealer = sealer
        self._clock = clock
        self._new_secret = new_secret
        # Tenants known to have a secret: a secret is never removed, so once seen it
        # spares every later submission with a webhook_url a read.
        self._known: set[str] = set()

    async def rotate(self, tenant_id: str) -> str:
        """A new secret for the tenant, returned once in clear; the one it replaces
        keeps signing beside it for PREVIOUS_SECRET_SECONDS."""
        now = self._clock.now()
        secret = self._new_secret()
        old = await self._store.get_secret(tenant_id)
        await self._store.put_secret(
            StoredSecret(
                tenant_id=tenant_id,
                current=self._sealer.seal(secret),
                created_at=now,
                previous=None if old is None else old.current,
                previous_until=None if old is None else now + PREVIOUS_SECRET_SECONDS,
            )
        )
        self._known.add(tenant_id)
        return secret

    async def has_secret(self, tenant_id: str) -> bool:
        if tenant_id in self._known:
            return True
        if await self._store.get_secret(tenant_id) is None:
            return False
        self._known.add(tenant_id)
        return True

    async def signing(self, tenant_id: str) -> list[str]:
        """The secrets that sign the tenant's notifications now, current first; empty
        when it has none. WebhookSecretUnreadableError when one cannot be opened."""
        stored = await self._store.get_secret(tenant_id)
        if stored is None:
            return []
        secrets = [self._sealer.open(stored.current)]
        if (
            stored.previous is not None
            and stored.previous_until is not None
            and stored.previous_until > self._clock.now()
        ):
            secrets.append(self._sealer.open(stored.previous))
        return secrets


class WebhookKick(JobObserver):
    """Tells this process's dispatcher at once that a job it finished owes a
    notification, so the first attempt does not wait for the next scan."""

    def __init__(self) -> None:
        self.kicked = asyncio.Event()

    def completed(self, change: Change) -> None:
        if change.after.webhook_due_at is not None:
            self.kicked.set()


class WebhookDispatcher:
    def __init__(
        self,
        *,
        store: JobUpkeep,
        ledger: JobLedger,
        jobs: JobQueries,
        secrets: WebhookSecrets,
        sender: WebhookSender,
        sign: Callable[[list[str], str, int, bytes], str],
        render: Callable[[str, float, JobView], bytes],
        clock: Clock,
        options: DispatchOptions | None = None,
        kick: WebhookKick | None = None,
    ) -> None:
        self._store = store
        self._ledger = ledger
        self._jobs = jobs
        self._secrets = secrets
        self._sender = sender
        self._sign = sign
        self._render = render
        self._clock = clock
        self._options = options or DispatchOptions()
        self._kick = kick or WebhookKick()
        self._in_flight: dict[str, asyncio.Task[None]] = {}  # by job id
        self._per_tenant: dict[str, int] = {}

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    async def run(self, stop: asyncio.Event) -> None:
        """Dispatch until ``stop`` is set, then let the attempts under way finish
        (each is bounded by the delivery timeout)."""
        try:
            while not stop.is_set():
                self._kick.kicked.clear()
                try:
                    await self.dispatch_once()
                except Exception as exc:  # noqa: BLE001 - looked at again next round
                    log.warning("webhooks.scan_failed", **describe_exception(exc))
                await _first_of(stop, self._kick.kicked, within=self._options.poll_seconds)
        finally:
            await self.drain()
            await self._sender.aclose()

    async def drain(self) -> None:
        """Wait for every attempt under way."""
        while self._in_flight:
            await asyncio.gather(*self._in_flight.values(), return_exceptions=True)

    async def dispatch_once(self) -> int:
        """Claim the due notifications this process has room for and start their
        attempts (without waiting for them); how many were started."""
        room = self._options.max_in_flight - len(self._in_flight)
        if room <= 0:
            return 0
        full = [
            t for t, n in self._per_tenant.items() if n >= self._options.max_in_flight_per_tenant
        ]
        due = await self._store.webhooks_due(now=self._clock.now(), limit=room, skip_tenants=full)
        started = 0
        for job in due:
            if job.job_id in self._in_flight or not self._has_room(job.tenant_id):
                continue
            now = self._clock.now()
            claimed = await self._ledger.claim_webhook(
                job, now=now, lease_until=now + self._options.claim_seconds
            )
            if claimed is None:
                continue
            self._start(claimed)
            started += 1
        return started

    def _has_room(self, tenant_id: str) -> bool:
        return (
            len(self._in_flight) < self._options.max_in_flight
            and self._per_tenant.get(tenant_id, 0) < self._options.max_in_flight_per_tenant
        )

    def _start(self, job: Job) -> None:
        tenant = job.tenant_id
        self._per_tenant[tenant] = self._per_tenant.get(tenant, 0) + 1
        task = asyncio.create_task(self._attempt(job), name=f"webhook {job.job_id}")
        self._in_flight[job.job_id] = task

        def _done(_: asyncio.Task[None]) -> None:
            self._in_flight.pop(job.job_id, None)
            left = self._per_tenant.get(tenant, 1) - 1
            if left:
                self._per_tenant[tenant] = left
            else:
                self._per_tenant.pop(tenant, None)
            self._kick.kicked.set()  # a slot is free: look again now

        task.add_done_callback(_done)

    async def _attempt(self, job: Job) -> None:
        """One delivery attempt of the claimed notification, recorded. Never raises: a
        failure to record leaves the claim to expire and the attempt to be repeated."""
        try:
            await self._deliver_and_record(job)
        except Exception as exc:  # noqa: BLE001 - the claim expires and the attempt repeats
            log.warning(
                "webhooks.attempt_unrecorded",
                job_id=job.job_id,
                tenant_id=job.tenant_id,
                **describe_exception(exc),
            )

    async def _deliver_and_record(self, job: Job) -> None:
        attempt_no = job.webhook_attempts
        event_seq = job.webhook_event_seq
        webhook_id = rules.webhook_id(job.job_id, event_seq)
        started = time.monotonic()
        outcome = await self._send(job, webhook_id)
        if outcome is None:
            return
        status_code, error = outcome
        now = self._clock.now()
        delivered = rules.delivered(status_code)
        next_due_at = (
            None
            if delivered
            else rules.next_attempt_at(
                attempts_made=attempt_no,
                status_code=status_code,
                now=now,
                schedule=self._options.schedule,
            )
        )
        detail: dict[str, Any] = {
            "webhook_id": webhook_id,
            "attempt": attempt_no,
            "status_code": status_code,
            "duration_ms": round((time.monotonic() - started) * 1000),
        }
        if not delivered:
            detail["error"] = error
            detail["next_attempt_at"] = next_due_at
        await self._ledger.record_webhook_attempt(
            job.job_id,
            now=now,
            event_seq=event_seq,
            attempt_no=attempt_no,
            delivered=delivered,
            next_due_at=next_due_at,
            detail=detail,
        )
        log.info(
            "webhooks.delivered" if delivered else "webhooks.failed",
            job_id=job.job_id,
            tenant_id=job.tenant_id,
            attempt=attempt_no,
            status_code=status_code,
            error=None if delivered else error,
            gave_up=not delivered and next_due_at is None,
        )

    async def _send(self, job: Job, webhook_id: str) -> tuple[int | None, str | None] | None:
        """The attempt's answer (status code, or why there was none), or None when it
        could not be made for a reason of ours that will pass (a backend away): then
        nothing is recorded and the claim expires."""
        assert job.webhook_url is not None  # only owed notifications are claimed
        try:
            view = await self._jobs.get(job.tenant_id, job.job_id)
            secrets = await self._secrets.signing(job.tenant_id)
        except JobNotFoundError:
            return None  # purged meanwhile: nothing left to announce
        except BackendUnavailableError as exc:
            log.warning("webhooks.backend_away", job_id=job.job_id, **describe_exception(exc))
            return None
        except WebhookSecretUnreadableError:
            return None, "secret_unreadable"
        except FerrymanError as exc:  # a result that cannot be read: said on the event
            return None, exc.code
        if not secrets:
            return None, "no_signing_secret"
        completed_at = job.completed_at if job.completed_at is not None else job.updated_at
        body = self._render(rules.event_type(job), completed_at, view)
        timestamp = int(self._clock.now())
        signature = self._sign(secrets, webhook_id, timestamp, body)
        sent = await self._sender.send(
            job.webhook_url,
            webhook_id=webhook_id,
            timestamp=timestamp,
            body=body,
            signature=signature,
        )
        return sent.status_code, sent.error


async def _first_of(stop: asyncio.Event, kicked: asyncio.Event, *, within: float) -> None:
    """Return when ``stop`` or ``kicked`` is set, or after ``within`` seconds."""
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(kicked.wait())]
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
