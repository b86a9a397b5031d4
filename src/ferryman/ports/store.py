"""The job store's ports: what an engine must promise about jobs, their attempts and events.

Three small ports, split by who needs them (docs/architecture.md, "The store's ports"):

- ``JobWrites``, the write port: one write primitive, ``apply(change)``: persist a
  ``core.changes.Change`` (the job row, its events, the attempt rows it opens or
  closes, and where the engine can, the job's queue message) in one transaction, if
  and only if the stored job still has ``change.expected_revision``. Which change a
  transition makes is decided in core, never here; services/ledger.py reads, asks
  core and applies, recomputing when the revision moved. ``create`` and
  ``create_many`` are the same with an idempotency check instead of a revision.
- ``JobReads``, the query port: one job, lists, events, attempts, usage, health.
  Services that only read take it directly, never the ledger.
- ``JobUpkeep``, the maintenance port: the scans of the sweeper and retention, and
  the purges.

``JobStore`` is their union: what an engine's store class implements. What may differ
between engines is stated, not hidden, in ``StoreCapabilities`` (and, for queues,
ports/queue.py's ``QueueCapabilities``); services honour it.

Times are epoch seconds passed in by the caller, so the caller's clock decides.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ferryman.core.errors import IdempotencyKeyMismatchError

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from ferryman.core.changes import Change
    from ferryman.core.job import Attempt, Event, Job, JobError, JobStatus
    from ferryman.ports.results import StagedResult


@dataclass(frozen=True, slots=True)
class StoreCapabilities:
    """What may differ between engines' stores, as each engine states it.

    The contract suite holds every engine to what it states here
    (tests/contract/test_capabilities.py), and the services honour it."""

    # The most new jobs ``create_many`` takes in one all-or-nothing transaction; None:
    # no limit of the engine's own (one transaction takes whatever the caller sends;
    # SQLite, PostgreSQL and memory, checked at the API's batch maximum of 1000). A
    # DynamoDB transaction holds at most 100 items. Intake writes a batch in chunks of
    # at most this many (services/intake.py) and says so in the batch response.
    max_atomic_batch: int | None = None
    # True: ``usage`` counts exactly what is stored as of the read (the counters move
    # in the transaction of the change that moves them). False: an estimate that may
    # lag or drift (an engine that counts asynchronously); quotas then bound storage
    # only approximately, and reports say so.
    usage_exact: bool = True
    # The most bytes of a job's input and metadata (UTF-8 JSON) one job can store; None:
    # no limit of the engine's own. A DynamoDB item holds at most 400 KB. ``create`` and
    # ``create_many`` refuse a bigger job with a ValueError naming the limit; the
    # services refuse it before that, as a request the engine cannot hold.
    max_job_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.max_atomic_batch is not None and self.max_atomic_batch < 1:
            raise ValueError("max_atomic_batch must be at least 1 (or None: no limit)")
        if self.max_job_bytes is not None and self.max_job_bytes < 1:
            raise ValueError("max_job_bytes must be at least 1 (or None: no limit)")


@dataclass(frozen=True, slots=True)
class Accepted:
    """The outcome of create: the job, and whether this call created it."""

    job: Job
    created: bool


# One item's outcome in create_many: accepted (new or existing), or refused because its
# idempotency key already names a different request. Nothing else is per item.
CreateOutcome = Accepted | IdempotencyKeyMismatchError


# What a list item weighs against a page's byte budget besides its metadata and error:
# its ids, status, task, model, times and field names as JSON (about 350 bytes), with room.
LIST_ITEM_BYTES = 512


@dataclass(frozen=True, slots=True)
class JobSummary:
    """A job as a list shows it, with what serving its result takes: never its input.

    Engines read only these fields for a list, so a page of jobs with large inputs costs
    what its items show (docs/benchmarks.md, "Lists of jobs with large inputs")."""

    tenant_id: str
    job_id: str
    status: JobStatus
    task: str
    model: str
    created_at: float
    updated_at: float
    completed_at: float | None
    attempt_count: int
    correlation_id: str
    metadata: dict[str, Any] | None
    error: JobError | None
    cancel_requested: bool
    # The attempt that owns (or published) the job, and its result's reference: with
    # the tenant and job id they make the key a result is verified against.
    attempt_id: str | None
    result_ref: str | None
    # Which of its model's fallbacks it runs on: whose provider a waiting job waits for.
    fallback_level: int = 0

    @classmethod
    def of(cls, job: Job) -> JobSummary:
        return cls(
            tenant_id=job.tenant_id,
            job_id=job.job_id,
            status=job.status,
            task=job.task,
            model=job.model,
            created_at=job.created_at,
            updated_at=job.updated_at,
            completed_at=job.completed_at,
            attempt_count=job.attempt_count,
            correlation_id=job.correlation_id,
            metadata=job.metadata,
            error=job.error,
            cancel_requested=job.cancel_requested,
            attempt_id=job.attempt_id,
            result_ref=job.result_ref,
            fallback_level=job.fallback_level,
        )


@dataclass(frozen=True, slots=True)
class JobPage:
    """A page of a list, newest first. ``next_cursor`` is the id of its last job when
    more match (None at the end): a caller that serves only the first few jobs goes on
    after the last one it served by passing that job's id as the cursor."""

    jobs: list[JobSummary]
    next_cursor: str | None
    # What its jobs weigh against the byte budget (see JobStore.list_jobs).
    listed_bytes: int = 0


@dataclass(frozen=True, slots=True)
class TenantUsage:
    """What a tenant holds now: unfinished jobs (its backlog) and stored jobs."""

    unfinished: int
    stored: int


class UsageGroup(enum.StrEnum):
    DAY = "day"  # UTC day the attempt started
    MODEL = "model"  # the model alias it ran under
    TASK = "task"


@dataclass(frozen=True, slots=True)
class UsageRow:
    """What the attempts of one group (a day, a model, a task) used and cost."""

    key: str
    calls: int
    failed_calls: int  # attempts whose call failed (a failure class was recorded)
    input_tokens: int
    output_tokens: int
    cost_nano_usd: int
    # Cost of the calls whose result is not the job's published one: retries, lost
    # leases, abandoned and cancelled attempts, final failures.
    wasted_nano_usd: int
    # Calls the model answered (a finish reason was recorded) without saying what they
    # used: their tokens and cost are unknown (null), left out of the sums above, never
    # counted as 0 tokens and $0.
    unknown_usage_calls: int


class Hint(Protocol):
    """A nudge that the store may hold news, never the news itself: whoever wakes reads
    the store as it would on its periodic look, so a lost nudge costs only latency."""

    @property
    def generation(self) -> int:
        """Bumped by every nudge."""
        ...

    async def wait(self, *, since: int, timeout_seconds: float) -> None:
        """Return once the generation is no longer ``since``, or after the timeout."""
        ...


class JobWrites(Protocol):
    """The write port: new jobs and changes, each in one transaction."""

    @property
    def capabilities(self) -> StoreCapabilities:
        """What this engine promises where engines differ (StoreCapabilities)."""
        ...

    # True when apply() writes the job's queue message for a change with ``enqueue``
    # in the same transaction (the SQL engines); intake then skips the outbox path.
    @property
    def enqueues_with_job(self) -> bool: ...

    async def create(self, change: Change, *, idempotency_expires_at: float | None) -> Accepted:
        """Store a new job (``change.before`` is None) atomically with its idempotency
        entry. With a live entry for (tenant, key): the same request_hash returns the
        existing job (created=False); another hash raises IdempotencyKeyMismatchError
        and stores nothing. An expired entry is replaced. None: the entry never expires."""
        ...

    async def create_many(
        self, changes: Sequence[Change], *, idempotency_expires_at: float | None
    ) -> list[CreateOutcome]:
        """``create`` for many new jobs in ONE transaction: every new job is committed
        together or none is. Per item, in order: Accepted (created, or the job a live
        entry for its key already names), or IdempotencyKeyMismatchError (that item
        stores nothing; the others are unaffected). Two changes with the same (tenant,
        key) resolve as if created one after the other in order: the first stores the
        job, a later one with the same request replays it, a later different one is a
        mismatch. Any other failure fails the whole call, with nothing stored."""
        ...

    async def apply(self, change: Change) -> bool:
        """Persist the change if the job's revision is still ``change.expected_revision``.
        False, with nothing written, when it is not (or the job is gone)."""
        ...


class JobReads(Protocol):
    """The query port: what the API, the CLI and the worker read. Nothing here writes."""

    @property
    def capabilities(self) -> StoreCapabilities:
        """What this engine promises where engines differ (StoreCapabilities)."""
        ...

    async def get(self, job_id: str, *, tenant_id: str | None = None) -> Job | None:
        """The job, or None. With tenant_id, a job of another tenant is None too."""
        ...

    async def get_many(self, job_ids: Collection[str]) -> dict[str, Job]:
        """The jobs that exist among these, by id, in one read (a worker's receive batch)."""
        ...

    async def list_jobs(
        self,
        *,
        tenant_id: str | None,
        status: JobStatus | None = None,
        task: str | None = None,
        error_code: str | None = None,
        job_ids: Collection[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
        max_bytes: int | None = None,
    ) -> JobPage:
        """Newest first (by job_id, a ULID), after ``cursor`` (a job id). tenant_id None
        lists every tenant (operators); ``job_ids`` keeps only those jobs (an empty
        collection: none), never another tenant's. Reads only what a JobSummary holds.

        With ``max_bytes``, the page also ends before the job that would take its
        ``listed_bytes`` over it (always at least one job): a job weighs LIST_ITEM_BYTES
        plus the UTF-8 bytes of its metadata and error as stored (compact JSON). An
        engine stops reading there, so one list never holds more than that in memory."""
        ...

    async def events(self, job_id: str) -> list[Event]:
        """In seq order (1, 2, ...)."""
        ...

    async def attempts(self, job_id: str) -> list[Attempt]:
        """In attempt_no order."""
        ...

    async def cancel_requested(self, job_ids: Collection[str]) -> set[str]:
        """Which of these jobs have a cancel request (one cheap read for many calls)."""
        ...

    @property
    def cancel_hints(self) -> Hint:
        """Nudged once a change that asks a running attempt to stop
        (``Change.stops_running_attempt``) is stored: by this process's own writes, and
        by other processes' where the engine carries it (SQLite: the socket directory
        beside the file; PostgreSQL: NOTIFY in the cancelling transaction). A worker
        runs its cancel check on a nudge instead of waiting for the next period."""
        ...

    @property
    def status_hints(self) -> Hint:
        """Nudged once a change that moves a job to another status
        (``Change.changes_status``) is stored: by this process's own writes, and by
        other processes' where the engine carries it (SQLite: the socket directory
        beside the file; PostgreSQL: NOTIFY in the changing transaction; AWS: this
        process's own writes only). A client's wait (services/watch.py) reads its jobs
        on a nudge instead of at its next fallback poll."""
        ...

    async def usage(self, tenant_id: str) -> TenantUsage: ...

    async def usage_report(
        self, *, tenant_id: str | None, start: float, end: float, group_by: UsageGroup
    ) -> list[UsageRow]:
        """Attempts started in [start, end) of a tenant (None: every tenant), grouped,
        in key order."""
        ...

    async def ping(self, *, write: bool = False) -> None:
        """Raise StoreUnavailableError when the store cannot be read (or, with
        ``write``, cannot take a durable write now)."""
        ...


class JobUpkeep(Protocol):
    """The maintenance port: the scans and purges of the sweeper and retention."""

    async def stalled(self, *, now: float, older_than_seconds: float, limit: int) -> list[Job]:
        """Non-terminal jobs nothing drives, oldest updated_at first. All have
        updated_at before now - older_than, and one of: dispatch PENDING (QUEUED or
        RETRY_SCHEDULED); PROCESSING with lease_until before now - older_than;
        RETRY_SCHEDULED with not_before before now - older_than. Where the engine keeps
        the queue with the jobs (``enqueues_with_job``), a job with a message still in
        the queue (visible, in flight or delayed) is not among them: that message's
        next delivery drives it. An engine whose queue is elsewhere cannot tell and
        lists it anyway (the message the sweeper re-sends is then a harmless
        duplicate)."""
        ...

    async def existing(self, job_ids: Collection[str]) -> set[str]:
        """Which of these jobs still exist."""
        ...

    async def webhooks_due(
        self, *, now: float, limit: int, skip_tenants: Collection[str] = ()
    ) -> list[Job]:
        """Up to ``limit`` jobs whose completion webhook is owed and due
        (``webhook_due_at`` at or before now), earliest due first, leaving out the
        tenants in ``skip_tenants`` (those whose receivers already hold all the
        deliveries the dispatcher gives one tenant at a time, so that one slow
        receiver's backlog never hides other tenants' notifications): the dispatcher's
        scan (services/webhooks.py). Read through an index of owed notifications
        only, never a scan of every job."""
        ...

    async def purge_finished(self, *, completed_before: float, limit: int) -> list[str]:
        """Delete up to ``limit`` finished jobs completed before the time, with their
        events, attempts and idempotency entries, in one transaction; their ids. A job
        whose webhook is still owed (``webhook_due_at`` set) is kept until it is
        delivered or given up."""
        ...

    async def purge_expired_keys(self, *, now: float, limit: int) -> int:
        """Delete up to ``limit`` expired idempotency entries; how many."""
        ...


class JobStore(JobWrites, JobReads, JobUpkeep, Protocol):
    """Every port of the store in one: what an engine's store class implements. A
    service takes the narrowest port it needs; the ledger takes this one (it writes,
    and reads the job it is about to change)."""


@runtime_checkable
class AcksWithOutcome(Protocol):
    """Optional, beside JobStore: an engine whose queue lives in the same database as
    its jobs deletes a job's message in the transaction that ends the job.

    That is one transaction (one commit, one fsync) fewer per job than the outcome
    followed by ``JobQueue.delete``, and it still acknowledges only after durability
    (I5): the delete commits with the terminal write or not at all. An engine without
    it (or whose ``acks_with_outcome`` is False) keeps the two steps, which is what
    services/ledger.py and services/delivery.py fall back to."""

    @property
    def acks_with_outcome(self) -> bool: ...

    async def apply_and_ack(self, change: Change, *, receipt: str) -> bool:
        """``apply(change)``; only if it applied, also delete the queue message the
        receipt names, as ``JobQueue.delete`` would, in the same transaction."""
        ...


@runtime_checkable
class AppliesMany(Protocol):
    """Optional, beside JobStore: several jobs' changes in one transaction (a worker's
    claims for one receive batch: one commit instead of one each). Without it the
    ledger applies them one by one, concurrently, which is what it did before."""

    async def apply_many(self, changes: Sequence[Change]) -> list[bool]:
        """``apply`` for each change, in order, in one transaction: each is written only
        if its own job still has its ``expected_revision``, whatever became of the
        others. Per change, whether it was written."""
        ...


@runtime_checkable
class PublishesWithResult(Protocol):
    """Optional, beside JobStore: an engine that can write a staged result (ports/
    results.py's StagesResults) in the transaction of the change that publishes it.

    One commit (one group-commit wait) per job fewer than ``ResultStore.put`` followed
    by the publish, with the same guarantees: the result is durable no later than the
    job that references it, and under its attempt-specific key, so a late attempt
    never overwrites the published result. Without it (or for a result it does not
    take) the result is put first, which is what services/delivery.py falls back to."""

    def takes_result(self, result: StagedResult) -> bool:
        """Whether this store can write the result (it belongs in this database)."""
        ...

    async def apply_with_result(
        self, change: Change, *, result: StagedResult, receipt: str | None
    ) -> bool:
        """``apply(change)`` (or ``apply_and_ack`` with a receipt); only if the change
        was written and references ``result.ref``, also the result, in the same
        transaction. False, with nothing written, when the revision moved."""
        ...


@runtime_checkable
class ReadsStatuses(Protocol):
    """Optional, beside JobStore: the statuses of many jobs in one narrow read (their
    ids and statuses, nothing else). services/watch.py reads every watched job's status
    this way on each nudge, and whole jobs only for those whose status moved: a tenth
    of the cost of ``get_many`` for thousands of waits. Without it, it reads whole
    jobs."""

    async def statuses(self, job_ids: Collection[str]) -> dict[str, JobStatus]:
        """The status of each of these jobs that exists, by id."""
        ...
