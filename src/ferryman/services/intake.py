"""Intake: turn an authenticated request into a durable, dispatched job (I1, I7).

Order matters: everything that can reject a request (pause switch, idempotency
key syntax, task and input validation) runs before anything is stored, so bad
input costs nothing and leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ferryman.core.errors import InvalidRequestError, PausedError
from ferryman.core.idempotency import canonical_json, request_fingerprint, validate_idempotency_key
from ferryman.core.ids import new_correlation_id, new_job_id
from ferryman.core.job import DispatchState, Job
from ferryman.observability import metrics
from ferryman.ports.control import Switch
from ferryman.ports.queue import QueueMessage

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ferryman.core.clock import Clock
    from ferryman.ports.control import ControlStore
    from ferryman.ports.provider import ModelProvider
    from ferryman.ports.queue import JobQueue
    from ferryman.ports.store import JobStore
    from ferryman.tasks import TaskRegistry

MAX_METADATA_BYTES = 4096
PAUSED_RETRY_AFTER_SECONDS = 30


@dataclass(frozen=True, slots=True)
class SubmitRequest:
    task: str
    input: dict[str, Any]
    model: str | None = None
    metadata: dict[str, Any] | None = None
    webhook_url: str | None = None


@dataclass(frozen=True, slots=True)
class Submission:
    job: Job
    replayed: bool


class Intake:
    def __init__(
        self,
        *,
        store: JobStore,
        queue: JobQueue,
        tasks: TaskRegistry,
        control: ControlStore,
        clock: Clock,
        idempotency_retention_seconds: float,
        providers: Sequence[ModelProvider] = (),
    ) -> None:
        self._store = store
        self._queue = queue
        self._tasks = tasks
        self._control = control
        self._clock = clock
        self._retention_seconds = idempotency_retention_seconds
        self._providers = tuple(providers)

    async def submit(
        self,
        *,
        tenant_id: str,
        request: SubmitRequest,
        idempotency_key: str | None = None,
        correlation_id: str | None = None,
        traceparent: str | None = None,
    ) -> Submission:
        if Switch.INTAKE in await self._control.paused():
            raise PausedError(retry_after_seconds=PAUSED_RETRY_AFTER_SECONDS)
        if idempotency_key is not None:
            validate_idempotency_key(idempotency_key)
        job = self._new_job(tenant_id, request, idempotency_key, correlation_id, traceparent)
        now = job.created_at
        expires_at = now + self._retention_seconds if idempotency_key is not None else None
        accepted = await self._store.create(job, idempotency_expires_at=expires_at, now=now)
        if not accepted.created:
            metrics.IDEMPOTENT_REPLAYS.labels(tenant=tenant_id).inc()
            return Submission(job=accepted.job, replayed=True)
        metrics.JOBS_ACCEPTED.labels(task=job.task, tenant=tenant_id).inc()
        stored = accepted.job
        if stored.dispatch_state is DispatchState.PENDING:
            stored = await self._dispatch(stored)
        return Submission(job=stored, replayed=False)

    def _new_job(
        self,
        tenant_id: str,
        request: SubmitRequest,
        idempotency_key: str | None,
        correlation_id: str | None,
        traceparent: str | None,
    ) -> Job:
        task = self._tasks.get(request.task)
        job_input = task.validate_input(request.input)
        model = request.model or task.default_model
        self._check_model(model)
        metadata = _checked_metadata(request.metadata)
        options: dict[str, Any] = {"metadata": metadata, "webhook_url": request.webhook_url}
        now = self._clock.now()
        return Job(
            tenant_id=tenant_id,
            job_id=new_job_id(),
            task=task.name,
            model=model,
            input=job_input,
            metadata=metadata,
            request_hash=request_fingerprint(
                task=task.name, input=job_input, model=model, options=options
            ),
            idempotency_key=idempotency_key,
            correlation_id=correlation_id or new_correlation_id(),
            traceparent=traceparent,
            created_at=now,
            updated_at=now,
        )

    def _check_model(self, model: str) -> None:
        """An unknown model is bad input: refuse it now rather than fail it on a worker."""
        if self._providers and not any(p.serves(model) for p in self._providers):
            raise InvalidRequestError(
                f"unknown model {model!r}",
                errors=[{"loc": ["body", "model"], "msg": "no provider serves this model"}],
            )

    async def _dispatch(self, job: Job) -> Job:
        """The outbox path for engines that cannot enqueue in the job's transaction.

        If we crash between send and mark_dispatched, the sweeper re-sends the
        PENDING job; a second message is harmless because the job id is the identity.
        """
        await self._queue.send(QueueMessage.for_job(job))
        await self._store.mark_dispatched(job.job_id, now=self._clock.now())
        return dataclasses.replace(job, dispatch_state=DispatchState.DISPATCHED)


def _checked_metadata(metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    if metadata is None:
        return None
    try:
        size = len(canonical_json(metadata).encode("utf-8"))
    except (TypeError, ValueError) as exc:
        raise InvalidRequestError(
            "metadata must be JSON",
            errors=[{"loc": ["body", "metadata"], "msg": "must be a JSON object"}],
        ) from exc
    if size > MAX_METADATA_BYTES:
        raise InvalidRequestError(
            "metadata is over 4 KiB",
            errors=[
                {"loc": ["body", "metadata"], "msg": f"at most {MAX_METADATA_BYTES} bytes as JSON"}
            ],
        )
    return metadata
