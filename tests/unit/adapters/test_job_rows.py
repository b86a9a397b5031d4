"""adapters/job_rows.py: a job read from its row is the job that was written, and the
columns that take few values are one string shared by every job read."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ferryman.adapters.job_rows import job_from_row, job_params, job_update_params

if TYPE_CHECKING:
    from collections.abc import Callable

    from ferryman.core.job import Job


def _fresh(text: str) -> str:
    """An equal string that is not the same object (as a driver returns per row)."""
    return "".join(list(text))


def _row_of(job: Job) -> dict[str, Any]:
    row = job_params(job)
    return {k: _fresh(v) if isinstance(v, str) else v for k, v in row.items()}


def test_a_job_read_from_its_row_is_the_job_written(job_factory: Callable[..., Job]) -> None:
    job = job_factory(worker_id="worker-1", metadata={"k": "v"})
    assert job_from_row(_row_of(job)) == job


def test_the_webhook_outbox_is_in_the_row_and_in_every_update(
    job_factory: Callable[..., Job],
) -> None:
    job = job_factory(
        webhook_url="https://hooks.example.com/x",
        webhook_due_at=12.5,
        webhook_attempts=2,
        webhook_event_seq=7,
    )
    assert job_from_row(_row_of(job)) == job
    # A finished job's webhook columns are the ones its later changes move.
    assert {"webhook_due_at", "webhook_attempts", "webhook_event_seq"} <= set(
        job_update_params(job)
    )
    assert "webhook_url" not in job_update_params(job)  # fixed at intake


def test_tenant_task_model_and_worker_are_shared_across_jobs(
    job_factory: Callable[..., Job],
) -> None:
    first = job_from_row(_row_of(job_factory(worker_id="worker-1")))
    second = job_from_row(_row_of(job_factory(worker_id="worker-1")))
    assert first.tenant_id is second.tenant_id
    assert first.task is second.task
    assert first.model is second.model
    assert first.worker_id is second.worker_id
    # Ids are each job's own.
    assert first.job_id != second.job_id
    assert job_from_row(_row_of(job_factory())).worker_id is None
