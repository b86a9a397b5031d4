"""How the client's commands show jobs, lists and histories as tables.

Ids, statuses and times are never wrapped (``print_table`` widens the table to its
longest one); only free text (an error message, a result, an event's detail) may fold.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from ferryman.cli.common import instant

if TYPE_CHECKING:
    from ferryman.client import Job, JobHistory

_STATUS_STYLES = {
    "SUCCEEDED": "green",
    "FAILED": "bold red",
    "CANCELLED": "yellow",
    "RETRY_SCHEDULED": "yellow",
    "PROCESSING": "cyan",
}


def status_text(status: str) -> Text:
    return Text(str(status), style=_STATUS_STYLES.get(str(status), ""))


def compact(value: Any) -> str:
    return "-" if value is None else json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _error_text(job: Job) -> str:
    if job.error is None:
        return "-"
    return f"{job.error.failure_class} {job.error.code}: {job.error.message}"


def _waiting_text(job: Job) -> str:
    wait = job.waiting
    if wait is None:
        return "-"
    if not wait.automatic:
        how = "by an operator"
    elif wait.next_check_at is None:
        how = "automatically; an operator resumes it"
    else:
        how = f"automatically; next check {instant(wait.next_check_at)}"
    return f"provider {wait.provider} paused since {instant(wait.since)} ({how})"


def job_table(job: Job) -> Table:
    """One job, a field per row."""
    table = Table(show_header=False, title=f"job {job.job_id}")
    table.add_column("field", no_wrap=True, style="bold")
    table.add_column("value", overflow="fold")
    rows: list[tuple[str, Text | str]] = [
        ("job_id", Text(job.job_id, no_wrap=True)),
        ("status", status_text(job.status)),
        ("task", Text(job.task or "-")),
        ("model", Text(job.model or "-")),
        ("attempts", str(job.attempt_count)),
        ("created", instant(job.created_at)),
        ("updated", instant(job.updated_at)),
        ("completed", instant(job.completed_at)),
        ("correlation_id", Text(job.correlation_id or "-", no_wrap=True)),
        ("cancel requested", "yes" if job.cancel_requested else "no"),
        ("metadata", Text(compact(job.metadata))),
        ("error", Text(_error_text(job))),
        ("waiting for", Text(_waiting_text(job))),
        ("result", Text(compact(job.result))),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def jobs_table(jobs: list[Job]) -> Table:
    table = Table(title="jobs (newest first)")
    for column in ("job_id", "status", "task", "model", "attempts", "created", "completed"):
        table.add_column(column, no_wrap=True)
    table.add_column("error", overflow="fold")
    for job in jobs:
        table.add_row(
            Text(job.job_id),
            status_text(job.status),
            Text(job.task or "-"),
            Text(job.model or "-"),
            str(job.attempt_count),
            instant(job.created_at),
            instant(job.completed_at),
            Text(_error_text(job)),
        )
    return table


def events_table(history: JobHistory) -> Table:
    table = Table(title="events")
    for column in ("seq", "at", "kind"):
        table.add_column(column, no_wrap=True)
    table.add_column("detail", overflow="fold")
    for event in history.events:
        detail = compact(event.detail) if event.detail else ""
        table.add_row(str(event.seq), instant(event.at), Text(event.kind), Text(detail))
    return table


def attempts_table(history: JobHistory) -> Table:
    table = Table(title="attempts")
    columns = ("no", "attempt_id", "worker", "started", "ended", "outcome", "class", "ms")
    for column in (*columns, "tokens in/out"):
        table.add_column(column, no_wrap=True)
    for attempt in history.attempts:
        table.add_row(
            str(attempt.attempt_no),
            Text(attempt.attempt_id or "-"),
            Text(attempt.worker_id or "-"),
            instant(attempt.started_at),
            instant(attempt.ended_at),
            Text(attempt.outcome or "running"),
            Text(str(attempt.failure_class or "-")),
            "-" if attempt.latency_ms is None else str(attempt.latency_ms),
            f"{_count(attempt.input_tokens)}/{_count(attempt.output_tokens)}",
        )
    return table


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)
