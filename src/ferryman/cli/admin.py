"""Operator commands that act on the database directly: keys, dead letters, purge.

Only ``keys create`` may make a database (saying so loudly); the others need an
existing one, so a mistyped path or a wrong directory is an error, never a fresh
empty file. ``--json`` prints what the operations API answers for the same request.
The server's modules are imported inside the commands (see ``needs_server``).
"""

from __future__ import annotations

import getpass
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from ferryman.cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    err_console,
    existing_database,
    fail,
    instant,
    parse_duration,
    parse_instant,
    print_json,
    print_table,
    run,
    settings,
    warn,
)
from ferryman.core.errors import ApiKeyNotFoundError, LastAdminKeyError, RequestError
from ferryman.ports.keys import RevokeOutcome
from ferryman.services.access import MAX_KEY_LIFETIME_SECONDS, key_state

if TYPE_CHECKING:
    from ferryman.config import Settings
    from ferryman.ports.keys import ApiKeyRecord, Revocation
    from ferryman.ports.queue import UndecodableLetter
    from ferryman.ports.store import JobPage, JobSummary
    from ferryman.services.access import IssuedKey
    from ferryman.services.operations import ReplayReport
    from ferryman.services.retention import PurgeReport

JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the operations API's JSON instead of a table.")
]


def create_key(
    tenant: Annotated[str, typer.Option(help="The tenant the key acts for.")],
    admin: Annotated[bool, typer.Option("--admin", help="May use the operations API.")] = False,
    expires_in: Annotated[
        str | None, typer.Option(help="Expire after this long: 90m, 12h, 30d, 2w.")
    ] = None,
    expires_at: Annotated[
        str | None, typer.Option(help="Expire at this RFC 3339 time, e.g. 2030-01-31T18:00:00Z.")
    ] = None,
) -> None:
    """Create an API key and print it alone on stdout (it is shown only this once).

    Where it was stored goes to stderr, by absolute path, with a loud warning when
    there was no database there and a new one had to be made.
    """
    s = settings()
    expiry = _expiry(expires_in, expires_at)
    created = run(_create_key(s, tenant, admin, expiry))
    if not created.database_existed:
        warn(
            f"there was no database at {created.database}, so a new, empty one was made. "
            "A server using another database will refuse this key (401): point "
            "FERRYMAN_DATABASE_URL at the server's database, e.g. "
            "sqlite:////absolute/path/ferryman.db, or run this in the server's directory."
        )
    record = created.issued.record
    what = "admin key" if record.admin else "key"
    expiry_note = f", expires {instant(record.expires_at)}" if record.expires_at else ""
    err_console.print(
        Text(
            f"{what} {record.key_id} for tenant {record.tenant_id}{expiry_note}, "
            f"stored in {created.database}"
        )
    )
    typer.echo(created.issued.token)


@dataclass(frozen=True, slots=True)
class _Created:
    issued: IssuedKey
    database: str
    database_existed: bool


def _expiry(expires_in: str | None, expires_at: str | None) -> float | None:
    """The expiry as epoch seconds, checked before any database is opened (exit 2)."""
    if expires_in is not None and expires_at is not None:
        fail("give --expires-in or --expires-at, not both", EXIT_USAGE)
    if expires_in is not None:
        at = time.time() + parse_duration(expires_in, "--expires-in")
    elif expires_at is not None:
        at = parse_instant(expires_at, "--expires-at")
    else:
        return None
    if not time.time() < at <= time.time() + MAX_KEY_LIFETIME_SECONDS:
        fail("a key's expiry must be in the future, and at most 100 years away", EXIT_USAGE)
    return at


async def _create_key(s: Settings, tenant: str, admin: bool, expires_at: float | None) -> _Created:
    from ferryman.wiring import open_runtime, probe_database

    existed = (await probe_database(s)).exists
    async with open_runtime(s, call_models=False) as runtime:
        try:
            issued = await runtime.api_keys.issue(tenant, admin=admin, expires_at=expires_at)
        except RequestError as exc:
            fail(exc.message, EXIT_USAGE)
    return _Created(issued=issued, database=runtime.database_path, database_existed=existed)


def list_keys(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Every API key (revoked and expired ones too), oldest first. Never shows secrets."""
    from ferryman.http.routes.keys import key_body

    records, now = run(_list_keys(settings(), tenant))
    if as_json:
        print_json({"data": [key_body(record, now) for record in records]})
        return
    if not records:
        err_console.print(f"No API keys{f' for tenant {tenant}' if tenant else ''}.")
        return
    print_table(_keys_table(records, now))


async def _list_keys(s: Settings, tenant: str | None) -> tuple[list[ApiKeyRecord], float]:
    async with existing_database(s) as runtime:
        return await runtime.api_keys.list_keys(tenant_id=tenant), runtime.api_keys.now()


def _keys_table(records: list[ApiKeyRecord], now: float) -> Table:
    table = Table(title="API keys")
    for column in ("id", "tenant", "admin", "status", "created", "expires", "revoked"):
        table.add_column(column, no_wrap=True)
    for record in records:
        revoked = "-"
        if record.revoked_at is not None:
            revoked = f"{instant(record.revoked_at)} by {record.revoked_by or '?'}"
        table.add_row(
            Text(record.key_id),
            Text(record.tenant_id),
            "yes" if record.admin else "no",
            str(key_state(record, now)),
            instant(record.created_at),
            instant(record.expires_at),
            Text(revoked),
        )
    return table


def revoke_key(
    key: Annotated[str, typer.Argument(help="The key's id (as `keys list` shows it) or the key.")],
    actor: Annotated[str | None, typer.Option(help="Who [default: cli:<user>]")] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Revoke even the last usable admin key.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Revoke an API key: every API process refuses it (401) from its next request on.

    Revoking a key twice changes nothing. The last usable admin key is kept unless
    --force: without one, nobody can use the operations API until a new one is made.
    """
    s = settings()
    revocation = run(_revoke_key(s, key, actor or f"cli:{user()}", force))
    record = revocation.record
    assert record is not None
    if as_json:
        from ferryman.http.routes.keys import key_body

        already = revocation.outcome is RevokeOutcome.ALREADY_REVOKED
        print_json({**key_body(record, time.time()), "already_revoked": already})
        return
    if revocation.outcome is RevokeOutcome.ALREADY_REVOKED:
        typer.echo(
            f"{record.key_id} was already revoked "
            f"({instant(record.revoked_at)} by {record.revoked_by}); nothing changed"
        )
        return
    typer.echo(f"revoked {record.key_id} (tenant {record.tenant_id})")


async def _revoke_key(s: Settings, key: str, actor: str, force: bool) -> Revocation:
    async with existing_database(s) as runtime:
        try:
            return await runtime.api_keys.revoke(key, actor=actor, allow_last_admin=force)
        except ApiKeyNotFoundError as exc:
            fail(f"{exc.message} (database {runtime.database_path})")
        except LastAdminKeyError as exc:
            fail(
                f"{exc.message} Or pass --force: then nobody can use the operations API "
                "until `ferryman keys create --admin` makes a new admin key."
            )


def list_dead_letters(
    limit: Annotated[int, typer.Option(min=1, max=200, help="Jobs per page.")] = 50,
    cursor: Annotated[str | None, typer.Option(help="The next_cursor of a previous page.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Jobs failed because their message was dead-lettered, across tenants, newest first;
    then the dead letters no worker can read (their body names no job), if any."""
    from ferryman.cli.dead_letters import SHOWN_IN_LIST, letters_table
    from ferryman.http.views import admin_job_body

    page, undecodable = run(_dead_letters(settings(), limit, cursor))
    if as_json:
        data = [admin_job_body(job) for job in page.jobs]
        print_json(
            {
                "data": data,
                "next_cursor": page.next_cursor,
                "undecodable_letters": undecodable.count,
            }
        )
        return
    if not page.jobs:
        err_console.print("No dead-lettered jobs.")
    else:
        print_table(_table(page.jobs))
        if page.next_cursor:
            err_console.print(
                f"More: ferryman dlq list --cursor {page.next_cursor}", highlight=False
            )
    if undecodable.count:
        print_table(letters_table(undecodable.first))
        more = (
            " (ferryman dlq undecodable lists them all)"
            if undecodable.count > SHOWN_IN_LIST
            else ""
        )
        err_console.print(
            f"{undecodable.count} dead letters no worker can read: they name no job{more}. "
            "ferryman dlq show ID prints one; ferryman dlq purge ID --reason ... removes it.",
            highlight=False,
        )


@dataclass(frozen=True, slots=True)
class _Undecodable:
    count: int
    first: list[UndecodableLetter]


async def _dead_letters(
    s: Settings, limit: int, cursor: str | None
) -> tuple[JobPage, _Undecodable]:
    from ferryman.cli.dead_letters import SHOWN_IN_LIST

    async with existing_database(s) as runtime:
        operations = runtime.operations
        try:
            page = await operations.dead_letters(limit, cursor)
        except RequestError as exc:  # a cursor no list gave (core/cursors.py)
            fail(f"--cursor: {exc.message}", EXIT_USAGE)
        count = (await operations.queue_stats()).undecodable_letters
        first = (await operations.undecodable_letters(SHOWN_IN_LIST)).letters if count else []
        return page, _Undecodable(count=count, first=first)


def _table(jobs: list[JobSummary]) -> Table:
    table = Table(title="dead-lettered jobs")
    for column in ("job_id", "tenant", "task", "attempts", "failed at"):
        table.add_column(column, no_wrap=True)
    for job in jobs:
        table.add_row(
            Text(job.job_id),
            Text(job.tenant_id),
            Text(job.task),
            str(job.attempt_count),
            instant(job.completed_at),
        )
    return table


def replay_dead_letters(
    job_ids: Annotated[list[str], typer.Argument(help="Jobs to replay.")],
    reason: Annotated[str, typer.Option(help="Why (recorded on the REPLAYED event).")],
    actor: Annotated[str | None, typer.Option(help="Who [default: cli:<user>]")] = None,
    include_failed: Annotated[
        bool,
        typer.Option(
            "--include-failed",
            help="Also replay jobs that FAILED for a model reason, not only dead letters.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Replay dead-lettered jobs (and with --include-failed other FAILED ones).

    A job its client cancelled, or one that succeeded, is skipped and says why. Exits 0
    only when every job asked for was replayed; 1 when any was skipped (the lines, or
    the JSON, say which were replayed and why the others were not)."""
    if not reason.strip():
        fail("--reason must say why", EXIT_USAGE)
    who = actor or f"cli:{user()}"
    report = run(_replay(settings(), job_ids, who, reason, include_failed))
    if as_json:
        print_json(_replay_body(report))
    else:
        for job_id in report.replayed:
            typer.echo(f"replayed {job_id}")
        for job_id, why in report.skipped:
            typer.echo(f"skipped {job_id} ({why})")
    if report.skipped:
        # A script must not take "nothing replayed" (or not all of it) for success.
        raise typer.Exit(EXIT_FAILED)


def _replay_body(report: ReplayReport) -> dict[str, Any]:
    """As POST /v1/admin/dead-letters/replay answers."""
    skipped = [{"job_id": job_id, "reason": why} for job_id, why in report.skipped]
    return {"replayed": report.replayed, "skipped": skipped}


async def _replay(
    s: Settings, job_ids: list[str], actor: str, reason: str, include_failed: bool
) -> ReplayReport:
    async with existing_database(s) as runtime:
        return await runtime.operations.replay(
            job_ids, actor=actor, reason=reason, include_failed=include_failed
        )


def purge(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            help="Remove finished jobs completed longer ago than this: 90s, 15m, 12h, 30d, 2w.",
        ),
    ],
    batch_size: Annotated[
        int, typer.Option(min=1, max=10_000, help="Jobs removed per transaction.")
    ] = 500,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a sentence.")] = False,
) -> None:
    """Remove finished jobs older than a period, with their history and results.

    Unfinished jobs are never touched. Runs in batches, so it can run beside live work."""
    age = parse_duration(older_than, "--older-than")
    report = run(_purge(settings(), age, batch_size))
    summary = {
        "jobs": report.jobs,
        "expired_keys": report.keys,
        "result_bytes_reclaimed": report.result_bytes,
    }
    if as_json:
        print_json(summary)
        return
    typer.echo(
        f"purged {report.jobs} finished jobs completed more than {older_than} ago, "
        f"{report.keys} expired idempotency keys, {report.result_bytes} bytes of results"
    )


async def _purge(s: Settings, older_than_seconds: float, batch_size: int) -> PurgeReport:
    async with existing_database(s) as runtime:
        retention = runtime.new_retention(batch_size=batch_size)
        return await retention.purge(older_than_seconds=older_than_seconds, reclaim=True)


def user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
