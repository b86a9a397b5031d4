"""Intake: turn an authenticated request into a durable, dispatched job (I1, I7).

Order matters: everything that can reject a request (pause switch, idempotency
key syntax, task and input validation, the tenant's quotas) runs before anything is
stored, so bad input costs nothing and leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import structlog

from ferryman.core.errors import (
    BacklogQuotaExceededError,
    InvalidRequestError,
    PausedError,
    RequestError,
    StorageQuotaExceededError,
    StoreUnavailableError,
    UnsupportedFieldError,
    WebhookSecretRequiredError,
)
from ferryman.core.idempotency import canonical_json, request_fingerprint, validate_idempotency_key
from ferryman.core.ids import new_correlation_id, new_job_id
from ferryman.core.job import DispatchState, Job
from ferryman.observability import metrics
from ferryman.ports.control import Switch
from ferryman.ports.queue import QueueMessage
from ferryman.ports.store import TenantUsage

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ferryman.core.clock import Clock
    from ferryman.ports.control import ControlStore
    from ferryman.ports.queue import JobQueue
    from ferryman.ports.store import JobReads
    from ferryman.ports.webhooks import WebhookUrlCheck
    from ferryman.services.catalog import ModelCatalog
    from ferryman.services.ledger import JobLedger
    from ferryman.services.webhooks import WebhookSecrets
    from ferryman.tasks import TaskRegistry

log = structlog.get_logger("ferryman.intake")

MAX_METADATA_BYTES = 4096
PAUSED_RETRY_AFTER_SECONDS = 30
# How long a tenant's usage, once read, may stand in for a new read (see UsageEstimates):
# at hundreds of submissions a second one read in 0.1 s still spares nearly all of them,
# while what other processes accept unseen stays a tenth of a second's worth.
USAGE_REFRESH_SECONDS = 0.1
# The share of a quota kept as headroom for what an estimate cannot see: jobs other
# processes accepted since the read (and this process's submits still in flight).
USAGE_HEADROOM = 0.1
# Tenants whose estimates are kept; past this the oldest reads are forgotten.
MAX_USAGE_ESTIMATES = 10_000
# A batch is validated and written this many jobs at a time (fewer where the engine's
# transactions hold fewer: StoreCapabilities.max_atomic_batch), each slice in its own
# transaction: the store (on SQLite, one writer thread every process's writes queue
# for) takes other tenants' submissions between two slices instead of after a
# thousand jobs, and the event loop gets its turn between two validations.
BATCH_SLICE_JOBS = 100


@dataclass(frozen=True, slots=True)
class TenantQuotas:
    """What one tenant may hold; 0 means no limit."""

    max_backlog: int = 100_000  # unfinished jobs (Settings.tenants.max_backlog)
    max_stored_jobs: int = 0  # jobs kept, finished or not


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


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One job of a batch: the request, and its own Idempotency-Key."""

    request: SubmitRequest
    idempotency_key: str | None = None


# Each batch item's outcome: its job, or the refusal a single submit of it would get,
# or, for the items of a slice the store failed to take after earlier slices were
# stored, the store's failure (those items are not stored: send them again).
BatchOutcome = Submission | RequestError | StoreUnavailableError


@dataclass(slots=True)
class _Estimate:
    usage: TenantUsage
    read_at: float  # time.monotonic() of the read
    accepted: int = 0  # jobs this process accepted for the tenant since


class UsageEstimates:
    """A tenant's usage as last read plus the jobs this process accepted since, so a
    tenant far below its quotas is not read on every submission (one database read of
    three per submit, and O(jobs) on the memory engine).

    An estimate is used only while it is younger than USAGE_REFRESH_SECONDS (0.1 s) and
    the tenant stays below each quota by more than USAGE_HEADROOM (10%) of it; near a
    quota every submission reads the store, exactly as without estimates. It never
    undercounts this process's own acceptances (finished jobs only make it high, which
    costs a read). What it cannot see is what other API processes accepted for the
    tenant since its read: a tenant can overshoot a quota only if, within 0.1 s, the
    others accept more than the 10% headroom, so by at most what the tenant may submit
    in 0.1 s (its rate budget; at the defaults 600 jobs, against a headroom of 10,000).
    Quotas bound storage, not exactly: they were already a few submissions behind
    under concurrency."""

    def __init__(self) -> None:
        self._estimates: dict[str, _Estimate] = {}

    def current(self, tenant_id: str, quotas: TenantQuotas) -> TenantUsage | None:
        """The estimate when it may stand in for a read; None when the store must be read."""
        estimate = self._estimates.get(tenant_id)
        if estimate is None or time.monotonic() - estimate.read_at >= USAGE_REFRESH_SECONDS:
            return None
        usage = TenantUsage(
            estimate.usage.unfinished + estimate.accepted,
            estimate.usage.stored + estimate.accepted,
        )
        if not (
            _far_below(usage.unfinished, quotas.max_backlog)
            and _far_below(usage.stored, quotas.max_stored_jobs)
        ):
            return None
        return usage

    def read(self, tenant_id: str, usage: TenantUsage) -> None:
        estimates = self._estimates
        estimates.pop(tenant_id, None)
        if len(estimates) >= MAX_USAGE_ESTIMATES:
            del estimates[next(iter(estimates))]  # the oldest read
        estimates[tenant_id] = _Estimate(usage, time.monotonic())

    def accepted(self, tenant_id: str, count: int = 1) -> None:
        estimate = self._estimates.get(tenant_id)
        if estimate is not None:
            estimate.accepted += count


def _far_below(count: int, quota: int) -> bool:
    return not quota or count < quota - max(1.0, quota * USAGE_HEADROOM)


class Intake:
    def __init__(
        self,
        *,
        store: JobReads,
        ledger: JobLedger,
        queue: JobQueue,
        tasks: TaskRegistry,
        control: ControlStore,
        clock: Clock,
        idempotency_retention_seconds: float,
        catalog: ModelCatalog | None = None,
        quotas: TenantQuotas | None = None,
        sim_scripts: bool,
        webhook_urls: WebhookUrlCheck | None = None,
        webhook_secrets: WebhookSecrets | None = None,
    ) -> None:
        self._store = store
        self._ledger = ledger
        limit = store.capabilities.max_atomic_batch
        self._slice_jobs = BATCH_SLICE_JOBS if limit is None else min(BATCH_SLICE_JOBS, limit)
        self._queue = queue
        self._tasks = tasks
        self._control = control
        self._clock = clock
        self._retention_seconds = idempotency_retention_seconds
        self._catalog = catalog
        self._quotas = quotas or TenantQuotas()
        self._usage = UsageEstimates()
        self._sim_scripts = sim_scripts
        self._told_operator_about_scripts = False
        # Both or neither: a server without them refuses webhook_url (unsupported_field).
        self._webhook_urls = webhook_urls
        self._webhook_secrets = webhook_secrets

    def _refuse_sim_script(self) -> NoReturn:
        # The tenant learns that scripts are off and who can turn them on; the operator's
        # log says how, once per process (a tenant sending scripts must not flood it).
        if not self._told_operator_about_scripts:
            self._told_operator_about_scripts = True
            log.warning("intake.sim_script_refused", enable_with="FERRYMAN_SIM_SCRIPTS=true")
        msg = (
            "scripting the sim model (input.simulate) is turned off on this server; "
            "its operator can turn it on with FERRYMAN_SIM_SCRIPTS=true"
        )
        raise InvalidRequestError(msg, errors=[{"loc": ["body", "input", "simulate"], "msg": msg}])

    @property
    def atomic_chunk_size(self) -> int:
        """The most jobs of a batch written in one all-or-nothing transaction: a batch
        is stored in consecutive chunks of this many items (the last may be smaller)."""
        return self._slice_jobs

    def model_names(self) -> list[str] | None:
        """The models a submission may name; None when any name is taken (no catalog)."""
        return None if self._catalog is None else [a.name for a in self._catalog.aliases()]

    async def submit_many(
        self,
        *,
        tenant_id: str,
        items: Sequence[BatchItem],
        correlation_id: str | None = None,
        traceparent: str | None = None,
    ) -> list[BatchOutcome]:
        """Submit each item as ``submit`` would, in slices of ``atomic_chunk_size``
        items, each slice's accepted jobs in ONE transaction (JobWrites.create_many);
        the outcomes in the items' order.

        An item is refused on its own (bad key, task, input or model; over a quota; its
        key naming a different request) and never spoils the others. Quotas count the
        batch's earlier items as if they were already stored. Items sharing a key
        resolve in order: the first makes the job, a later identical one replays it, a
        later different one is a mismatch (across slices too: an earlier slice is
        stored before a later one is written). Paused intake refuses the whole batch.

        A store failure before any job of the batch was stored raises (none of it
        exists); after that, every item from the failed slice on is that failure, and
        the jobs of earlier slices stand: sent again with the same keys, the batch
        maps them to the stored jobs and stores the rest."""
        if Switch.INTAKE in await self._control.paused():
            raise PausedError(retry_after_seconds=PAUSED_RETRY_AFTER_SECONDS)
        correlation_id = correlation_id or new_correlation_id()
        refused = await self._refused_webhook_urls(tenant_id, items)
        usage = await self._batch_usage(tenant_id)
        outcomes: list[BatchOutcome] = []
        writing: asyncio.Future[list[BatchOutcome]] | None = None
        for start in range(0, len(items), self._slice_jobs):
            # Checked while the slice before is being written; written once it is.
            prepared = [
                refused.get(item.request.webhook_url or "")
                or self._prepared(tenant_id, item, correlation_id, traceparent)
                for item in items[start : start + self._slice_jobs]
            ]
            usage = self._refuse_over_quota(usage, prepared)
            if writing is not None and not await self._written(writing, outcomes, len(items)):
                return outcomes
            writing = asyncio.ensure_future(self._store_batch(tenant_id, prepared))
        if writing is not None:
            await self._written(writing, outcomes, len(items))
        return outcomes

    @staticmethod
    async def _written(
        writing: asyncio.Future[list[BatchOutcome]], outcomes: list[BatchOutcome], total: int
    ) -> bool:
        """Add a slice's outcomes; False when the store failed it (every item from it
        on is then that failure), raising if nothing of the batch was stored before."""
        try:
            outcomes.extend(await writing)
        except StoreUnavailableError as exc:
            if not any(isinstance(o, Submission) for o in outcomes):
                raise
            outcomes.extend([exc] * (total - len(outcomes)))
            return False
        return True

    def _prepared(
        self,
        tenant_id: str,
        item: BatchItem,
        correlation_id: str,
        traceparent: str | None,
    ) -> Job | RequestError:
        try:
            if item.idempotency_key is not None:
                validate_idempotency_key(item.idempotency_key)
            return self._new_job(
                tenant_id, item.request, item.idempotency_key, correlation_id, traceparent
            )
        except RequestError as exc:
            return exc

    async def _batch_usage(self, tenant_id: str) -> TenantUsage | None:
        """The tenant's usage, read once for a batch; None when it has no quotas."""
        if not (self._quotas.max_backlog or self._quotas.max_stored_jobs):
            return None
        usage = await self._store.usage(tenant_id)
        self._usage.read(tenant_id, usage)
        return usage

    def _refuse_over_quota(
        self, usage: TenantUsage | None, outcomes: list[Job | RequestError]
    ) -> TenantUsage | None:
        """Replace each job past the tenant's quotas with the quota's refusal; the
        usage counting the jobs let through."""
        if usage is None:
            return None
        for i, outcome in enumerate(outcomes):
            if isinstance(outcome, Job):
                refusal = self._quota_refusal(usage)
                if refusal is None:
                    usage = TenantUsage(usage.unfinished + 1, usage.stored + 1)
                else:
                    outcomes[i] = refusal
        return usage

    async def _store_batch(
        self, tenant_id: str, outcomes: list[Job | RequestError]
    ) -> list[BatchOutcome]:
        jobs = [outcome for outcome in outcomes if isinstance(outcome, Job)]
        if not jobs:
            return [o for o in outcomes if not isinstance(o, Job)]
        now = jobs[0].created_at
        # Only items with a key store an entry; the others ignore the expiry.
        expires_at = now + self._retention_seconds
        stored = iter(
            await self._ledger.create_many(jobs, idempotency_expires_at=expires_at, now=now)
        )
        tenant = metrics.tenant_label(tenant_id)
        final: list[BatchOutcome] = []
        for outcome in outcomes:
            if not isinstance(outcome, Job):
                final.append(outcome)
                continue
            accepted = next(stored)
            if isinstance(accepted, RequestError):
                final.append(accepted)
            elif not accepted.created:
                metrics.child(metrics.IDEMPOTENT_REPLAYS, tenant=tenant).inc()
                final.append(Submission(job=accepted.job, replayed=True))
            else:
                # Counted (ferryman_jobs_accepted_total) by the ledger's observers.
                self._usage.accepted(tenant_id)
                job = accepted.job
                if job.dispatch_state is DispatchState.PENDING:
                    job = await self._dispatch(job)
                final.append(Submission(job=job, replayed=False))
        return final

    @property
    def sim_scripts(self) -> bool:
        """Whether a job's input may carry the simulated model's ``simulate`` script."""
        return self._sim_scripts

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
        if job.webhook_url is not None:
            await self._check_webhook_url(tenant_id, job.webhook_url)
        await self._check_quotas(tenant_id)
        now = job.created_at
        expires_at = now + self._retention_seconds if idempotency_key is not None else None
        accepted = await self._ledger.create(job, idempotency_expires_at=expires_at, now=now)
        if not accepted.created:
            tenant = metrics.tenant_label(tenant_id)
            metrics.child(metrics.IDEMPOTENT_REPLAYS, tenant=tenant).inc()
            return Submission(job=accepted.job, replayed=True)
        # Counted (ferryman_jobs_accepted_total) by the ledger's observers.
        self._usage.accepted(tenant_id)
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
        if not self._sim_scripts and "simulate" in job_input:
            self._refuse_sim_script()
        model = request.model or task.default_model
        self._check_model(model)
        metadata = _checked_metadata(request.metadata)
        webhook_url = request.webhook_url
        if webhook_url is not None:
            self._webhook_syntax(webhook_url)
        # The fingerprint's layout is fixed forever (stored keys must keep matching):
        # webhook_url is null for a job without one, as it was before webhooks existed.
        options: dict[str, Any] = {"metadata": metadata, "webhook_url": webhook_url}
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
            webhook_url=webhook_url,
        )

    def _webhook_syntax(self, url: str) -> None:
        """What the URL's text alone refuses (no lookup: cheap enough for a batch)."""
        if self._webhook_urls is None:
            raise UnsupportedFieldError("webhooks are not offered by this server")
        self._webhook_urls.check_syntax(url)

    async def _check_webhook_url(self, tenant_id: str, url: str) -> None:
        """The tenant can be told (it has a signing secret) and the URL may be called
        (its host resolves to addresses ferryman may reach): before anything is stored."""
        if self._webhook_urls is None or self._webhook_secrets is None:
            raise UnsupportedFieldError("webhooks are not offered by this server")
        if not await self._webhook_secrets.has_secret(tenant_id):
            raise WebhookSecretRequiredError()
        await self._webhook_urls.check(url)

    async def _refused_webhook_urls(
        self, tenant_id: str, items: Sequence[BatchItem]
    ) -> dict[str, RequestError]:
        """Each distinct webhook_url of a batch checked once, the lookups at once; the
        refused ones with their refusal."""
        urls = {i.request.webhook_url for i in items if i.request.webhook_url is not None}
        if not urls:
            return {}
        checks = [self._check_webhook_url(tenant_id, url) for url in urls]
        outcomes = await asyncio.gather(*checks, return_exceptions=True)
        refused: dict[str, RequestError] = {}
        for url, outcome in zip(urls, outcomes, strict=True):
            if isinstance(outcome, RequestError):
                refused[url] = outcome
            elif isinstance(outcome, BaseException):
                raise outcome
        return refused

    async def _check_quotas(self, tenant_id: str) -> None:
        """A tenant over its quota is refused before anything is stored. The count may be a
        few submissions behind under concurrency: quotas bound storage, not exactly."""
        quotas = self._quotas
        if not (quotas.max_backlog or quotas.max_stored_jobs):
            return
        if self._usage.current(tenant_id, quotas) is not None:
            return  # far below every quota (UsageEstimates)
        usage = await self._store.usage(tenant_id)
        self._usage.read(tenant_id, usage)
        refusal = self._quota_refusal(usage)
        if refusal is not None:
            raise refusal

    def _quota_refusal(self, usage: TenantUsage) -> RequestError | None:
        quotas = self._quotas
        # Where the engine's counters are an estimate, the refusal says so.
        about = "" if self._store.capabilities.usage_exact else "about "
        if quotas.max_backlog and usage.unfinished >= quotas.max_backlog:
            return BacklogQuotaExceededError(
                f"this tenant has {about}{usage.unfinished} unfinished jobs, its limit "
                f"(FERRYMAN_TENANT_MAX_BACKLOG) is {quotas.max_backlog}; "
                "submit again when some have finished"
            )
        if quotas.max_stored_jobs and usage.stored >= quotas.max_stored_jobs:
            return StorageQuotaExceededError(
                f"this tenant has {about}{usage.stored} stored jobs, its limit "
                f"(FERRYMAN_TENANT_MAX_STORED_JOBS) is {quotas.max_stored_jobs}; "
                "old jobs are removed by `ferryman purge` or FERRYMAN_RETENTION_SECONDS"
            )
        return None

    def _check_model(self, model: str) -> None:
        """An unknown model is bad input: refuse it now rather than fail it on a worker."""
        if self._catalog is not None and not self._catalog.knows(model):
            raise InvalidRequestError(
                "unknown model",
                errors=[{"loc": ["body", "model"], "msg": "no model of that name is configured"}],
            )

    async def _dispatch(self, job: Job) -> Job:
        """The outbox path for engines that cannot enqueue in the job's transaction.

        If we crash between send and mark_dispatched, the sweeper re-sends the
        PENDING job; a second message is harmless because the job id is the identity.
        """
        await self._queue.send(QueueMessage.for_job(job))
        await self._ledger.mark_dispatched(job.job_id, now=self._clock.now(), known=job)
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
