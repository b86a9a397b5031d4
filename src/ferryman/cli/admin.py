"""Operator commands that act on the database directly: keys create, dlq list, dlq replay."""

from __future__ import annotations

import datetime as dt
import getpass
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from ferryman.cli.common import (
    EXIT_USAGE,
    err_console,
    fail,
    out_console,
    print_json,
    run,
    settings,
)
from ferryman.core.errors import RequestError
from ferryman.wiring import open_runtime

if TYPE_CHECKING:
    from ferryman.config import Settings
    from ferryman.core.job import Job
    from ferryman.ports.store import JobPage
    from ferryman.services.operations import ReplayReport


def create_key(
    tenant: Annotated[str, typer.Option(help="The tenant the key acts for.")],
    admin: Annotated[bool, typer.Option("--admin", help="May use the operations API.")] = False,
) -> None:
    """Create an API key and print it alone on stdout (it is shown only this once)."""
    key = run(_create_key(settings(), tenant, admin))
    typer.echo(key)


async def _create_key(s: Settings, tenant: str, admin: bool) -> str:
    async with open_runtime(s) as runtime:
        try:
            return await runtime.api_keys.create(tenant, admin=admin)
        except RequestError as exc:
            fail(exc.message, EXIT_USAGE)


def list_dead_letters(
    limit: Annotated[int, typer.Option(min=1, max=200, help="Jobs per page.")] = 50,
    cursor: Annotated[str | None, typer.Option(help="From a previous page.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
) -> None:
    """Jobs failed because their message was dead-lettered, across tenants, newest first."""
    page = run(_dead_letters(settings(), limit, cursor))
    if as_json:
        print_json(
            {"data": [_job_summary(job) for job in page.jobs], "next_cursor": page.next_cursor}
        )
        return
    if not page.jobs:
        err_console.print("No dead-lettered jobs.")
        return
    out_console.print(_table(page.jobs))
    if page.next_cursor:
        err_console.print(f"More: ferryman dlq list --cursor {page.next_cursor}", highlight=False)


async def _dead_letters(s: Settings, limit: int, cursor: str | None) -> JobPage:
    async with open_runtime(s) as runtime:
        return await runtime.operations.dead_letters(limit, cursor)


def _iso(at: float | None) -> str | None:
    return None if at is None else dt.datetime.fromtimestamp(at, dt.UTC).isoformat()


def _job_summary(job: Job) -> dict[str, object]:
    return {
        "job_id": job.job_id,
        "tenant_id": job.tenant_id,
        "task": job.task,
        "attempt_count": job.attempt_count,
        "completed_at": _iso(job.completed_at),
        "error_code": job.error.code if job.error else None,
    }


def _table(jobs: list[Job]) -> Table:
    table = Table(title="dead-lettered jobs")
    for column in ("job_id", "tenant", "task", "attempts", "failed at"):
        table.add_column(column, overflow="fold")
    for job in jobs:
        table.add_row(
            Text(job.job_id),
            Text(job.tenant_id),
            Text(job.task),
            str(job.attempt_count),
            _iso(job.completed_at) or "-",
        )
    return table


def replay_dead_letters(
    job_ids: Annotated[list[str], typer.Argument(help="Jobs to replay.")],
    reason: Annotated[str, typer.Option(help="Why (recorded on the REPLAYED event).")],
    actor: Annotated[str | None, typer.Option(help="Who [default: cli:<user>]")] = None,
) -> None:
    """Replay FAILED or CANCELLED jobs; a job that already SUCCEEDED is skipped."""
    if not reason.strip():
        fail("--reason must say why", EXIT_USAGE)
    who = actor or f"cli:{_user()}"
    report = run(_replay(settings(), job_ids, who, reason))
    for job_id in report.replayed:
        typer.echo(f"replayed {job_id}")
    for job_id, why in report.skipped:
        typer.echo(f"skipped {job_id} ({why})")


async def _replay(s: Settings, job_ids: list[str], actor: str, reason: str) -> ReplayReport:
    async with open_runtime(s) as runtime:
        return await runtime.operations.replay(job_ids, actor=actor, reason=reason)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
