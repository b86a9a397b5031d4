"""The ``ferryman`` command: every command and where it lives.

The client's commands (submit, status JOB_ID, list, events, cancel) need only what
``pip install ferryman`` installs; every other command runs the server side or opens
its database and needs ``ferryman[server]``. So this module imports nothing of the
server: those commands import it when they run, through ``needs_server``, which
names the extra to install when it is missing.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from ferryman import __version__
from ferryman.cli import admin, control, dead_letters, models, remote
from ferryman.cli.common import (
    EXIT_FAILED,
    err_console,
    fail,
    needs_server,
    out_console,
    run,
    settings,
    warn,
)
from ferryman.core.errors import FerrymanError, StoreUnavailableError

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from ferryman.cli.serving import Roles
    from ferryman.config import Settings
    from ferryman.wiring import Runtime

app = typer.Typer(
    name="ferryman",
    help="Durable jobs for slow, costly model calls.",
    no_args_is_help=True,
    add_completion=False,
    # A traceback never prints local variables: they may hold keys and settings.
    pretty_exceptions_show_locals=False,
)
keys_app = typer.Typer(
    help="API keys: create, list, revoke (straight in the database).", no_args_is_help=True
)
dlq_app = typer.Typer(
    help="Dead-lettered jobs: list and replay (straight in the database).", no_args_is_help=True
)
webhooks_app = typer.Typer(help="Completion webhooks: the signing secret.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")
app.add_typer(dlq_app, name="dlq")
app.add_typer(webhooks_app, name="webhooks")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"ferryman {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", callback=_print_version, is_eager=True
        ),
    ] = False,
) -> None:
    """Durable jobs for slow, costly model calls."""


HostOption = Annotated[
    str | None,
    typer.Option(
        "--host",
        envvar="FERRYMAN_HOST",
        show_envvar=True,
        show_default="127.0.0.1",
        help="Interface to listen on.",
    ),
]
PortOption = Annotated[
    int | None,
    typer.Option(
        "--port",
        envvar="FERRYMAN_PORT",
        show_envvar=True,
        show_default="8000",
        help="Port to listen on.",
    ),
]


async def _run_process(s: Settings, host: str, port: int, roles: Roles) -> int:
    from ferryman.cli.serving import banner, bind, run_roles
    from ferryman.cli.startup import open_when_available
    from ferryman.wiring import check_results_location, open_runtime

    # Before anything is made: a results path that cannot work leaves no new database.
    await asyncio.to_thread(check_results_location, s)
    sock = bind(host, port) if roles.api else None
    try:
        # Started while the database restarts or is still coming up: wait for it. Only a
        # process that serves the API makes a missing database: a worker pointed at a
        # mistyped path waits for it, naming it, instead of working on an empty new one.
        # Only a worker calls models, so only it needs the providers' keys.
        def opener() -> AbstractAsyncContextManager[Runtime]:
            return open_runtime(s, create=roles.api, call_models=roles.worker)

        async with open_when_available(opener, say=warn) as runtime:
            await runtime.prepare_storage()
            bound_port = sock.getsockname()[1] if sock is not None else port
            banner(runtime, host, bound_port, roles)
            return await run_roles(runtime, roles, sock)
    finally:
        if sock is not None:
            sock.close()


def _start(
    host: str | None,
    port: int | None,
    *,
    api: bool,
    worker: bool,
    sweeper: bool,
    concurrency: int | None = None,
) -> None:
    from ferryman.cli.serving import Roles, event_loop_factory

    roles = Roles(api=api, worker=worker, sweeper=sweeper, concurrency=concurrency)
    s = settings()
    try:
        code = run(
            _run_process(s, host or s.http.host, s.http.port if port is None else port, roles),
            event_loop_factory(),
        )
    except StoreUnavailableError as exc:
        fail(f"the database cannot be reached: {exc.message}")
    raise typer.Exit(code)


@app.command()
@needs_server
def serve(host: HostOption = None, port: PortOption = None) -> None:
    """API, workers and sweeper in one process, on the embedded SQLite database."""
    _start(host, port, api=True, worker=True, sweeper=True)


@app.command()
@needs_server
def api(host: HostOption = None, port: PortOption = None) -> None:
    """The HTTP API only (run workers with `ferryman worker`)."""
    _start(host, port, api=True, worker=False, sweeper=False)


@app.command()
@needs_server
def worker(
    concurrency: Annotated[
        int | None,
        typer.Option(
            min=1,
            envvar="FERRYMAN_WORKER_CONCURRENCY",
            show_envvar=True,
            show_default="64",
            help="Model calls in flight.",
        ),
    ] = None,
    no_sweeper: Annotated[
        bool, typer.Option("--no-sweeper", help="Do not run the (idempotent) sweeper here.")
    ] = False,
) -> None:
    """A worker (and a sweeper): runs model calls from the queue. Any number may run."""
    _start(None, None, api=False, worker=True, sweeper=not no_sweeper, concurrency=concurrency)


@app.command()
@needs_server
def doctor(
    function: Annotated[
        str | None,
        typer.Option(
            "--function",
            metavar="NAME",
            help="aws:// only: the Lambda worker to check (default: every Lambda the "
            "queue's event source mappings name).",
        ),
    ] = None,
) -> None:
    """Check the timeouts and limits that must agree, the database and the results location.

    On an aws:// URL: the live queue, its redrive policy and DLQ, and the Lambda worker's
    event source mapping and timeout. It only looks: nothing is created, migrated or
    written, whatever it finds.
    """
    from ferryman.cli.doctor import check_environment, check_live, check_settings, render

    s = settings()
    checks = [*check_settings(s), check_environment(), *run(check_live(s, function_name=function))]
    out_console.print(render(checks))
    failed = [check for check in checks if not check.ok]
    # Also one unwrapped line per failure and warning, readable in logs and narrow terminals.
    for check in checks:
        if not check.ok or check.warning:
            word = "FAIL" if not check.ok else "WARN"
            out_console.print(
                Text(f"{word} {check.rule} ({check.value}): {check.fix}"), soft_wrap=True
            )
    if failed:
        out_console.print(f"{len(failed)} check(s) failed.", style="bold red")
        raise typer.Exit(EXIT_FAILED)
    out_console.print("All checks passed.", style="green")


@app.command()
@needs_server
def migrate() -> None:
    """Make or upgrade the database and make the results directory.

    Makes the database if there is none and brings its schema up to date; makes the
    results directory if there is none. Says on stderr what it did, by absolute path.
    On aws://NAME: makes the table, queues and S3 bucket that are missing and names
    every setting of those that exist which disagrees (exit 1)."""
    run(_migrate(settings()))


async def _migrate(s: Settings) -> None:
    from ferryman.cli.aws_migrate import is_aws, migrate_aws

    if is_aws(s.database_url):
        # Before anything opens the engine: on AWS, migrating is provisioning.
        await migrate_aws(s)
        return
    from ferryman.wiring import (
        check_results_location,
        open_runtime,
        probe_database,
        results_location,
    )

    await asyncio.to_thread(check_results_location, s)
    before = await probe_database(s)
    try:
        async with open_runtime(s, call_models=False):
            pass
    except FerrymanError as exc:
        fail(f"{before.path}: {exc.message}")
    if not before.exists:
        err_console.print(f"created the database {before.path}", highlight=False)
    after = await probe_database(s)
    if before.schema_version == after.schema_version:
        err_console.print(f"schema already at version {after.schema_version}", highlight=False)
    else:
        err_console.print(
            f"schema upgraded from version {before.schema_version or 0} to {after.schema_version}",
            highlight=False,
        )
    directory = results_location(s)
    if directory is not None and not directory.exists():
        await asyncio.to_thread(directory.mkdir, mode=0o700, parents=True)
        err_console.print(f"created the results directory {directory}", highlight=False)


# The client's commands: only HTTP.
app.command()(remote.submit)
app.command()(remote.status)
app.command("list")(remote.list_jobs)
app.command()(remote.events)
app.command()(remote.cancel)
webhooks_app.command("secret")(remote.webhook_secret)
# The operator's commands: straight in the database.
app.command()(needs_server(control.pause))
app.command()(needs_server(control.resume))
keys_app.command("create")(needs_server(admin.create_key))
keys_app.command("list")(needs_server(admin.list_keys))
keys_app.command("revoke")(needs_server(admin.revoke_key))
dlq_app.command("list")(needs_server(admin.list_dead_letters))
dlq_app.command("replay")(needs_server(admin.replay_dead_letters))
dlq_app.command("undecodable")(needs_server(dead_letters.list_undecodable))
dlq_app.command("show")(needs_server(dead_letters.show_letter))
dlq_app.command("purge")(needs_server(dead_letters.purge_letters))
app.command()(needs_server(admin.purge))
app.command()(needs_server(models.models))


if __name__ == "__main__":
    app(prog_name="ferryman")
