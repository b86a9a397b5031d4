"""The commands that talk to a running API over HTTP, as any client does: submit,
status, list, events, cancel. They need only the client's dependencies.

An API that cannot be reached is said on stderr at once, with the address tried,
where it came from and how to change it, and the command exits 1: no silent retries
against an address that may simply be wrong. Once the API has answered, the client
rides out a restart (5xx, 429, a lost connection) for ``--retry-for`` seconds, saying
so on stderr. stdout carries only what the command returns.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from ferryman.cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    EXIT_WAIT_TIMEOUT,
    client_settings,
    err_console,
    fail,
    needs_server,
    parse_json_object,
    print_json,
    print_table,
)
from ferryman.cli.views import attempts_table, events_table, job_table, jobs_table
from ferryman.client import (
    DEFAULT_RETRY_BUDGET_SECONDS,
    Client,
    ClientError,
    JobStatus,
    UnreachableError,
    WaitTimeoutError,
)

if TYPE_CHECKING:
    from types import TracebackType

    from rich.status import Status

    from ferryman.client import Job, RetryNotice

DEFAULT_URL = "http://127.0.0.1:8000"
UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="FERRYMAN_URL",
        show_envvar=True,
        show_default=DEFAULT_URL,
        help="API address.",
    ),
]
ApiKeyOption = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar="FERRYMAN_API_KEY",
        show_envvar=True,
        show_default="none",
        help="API key.",
    ),
]
RetryOption = Annotated[
    float,
    typer.Option(
        "--retry-for",
        min=0,
        show_default=True,
        help="Seconds to keep retrying once the API has answered, while it restarts or is "
        "busy (0: never). An API never reached is an error at once.",
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the API's JSON instead of a table.")
]
JobIdArgument = Annotated[str, typer.Argument(help="The job id (gen_...).", show_default=False)]
_HOW_TO_CHANGE = "Pass --url or set FERRYMAN_URL to use another address."
# After the first "lost the API", a reminder at most this often while retries go on.
_REMIND_EVERY_SECONDS = 5.0


class _Retries:
    """What the user hears on stderr while the client retries an API it has reached."""

    def __init__(self) -> None:
        self._said_unreachable_at: float | None = None

    def __call__(self, notice: RetryNotice) -> None:
        if not notice.unreachable:
            message = (
                f"{notice.base_url} answered {notice.error}; "
                f"retrying in {notice.delay_seconds:.1f}s"
            )
        elif self._said_unreachable_at is None:
            message = (
                f"lost ferryman at {notice.base_url} ({notice.error}); "
                f"retrying for up to {notice.budget_seconds:g}s (--retry-for)"
            )
        elif notice.elapsed_seconds - self._said_unreachable_at >= _REMIND_EVERY_SECONDS:
            message = (
                f"still cannot reach {notice.base_url} after {notice.elapsed_seconds:.0f}s; "
                f"retrying until {notice.budget_seconds:g}s"
            )
        else:
            return
        if notice.unreachable:
            self._said_unreachable_at = notice.elapsed_seconds
        err_console.print(Text(message, style="yellow"))


class _WaitProgress:
    """``submit --wait`` on stderr: a spinner with the status and attempt count on a
    terminal; otherwise one plain line each time either changes."""

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._last: tuple[str, int] | None = None
        self._spinner: Status | None = None

    def __enter__(self) -> _WaitProgress:
        if err_console.is_terminal:
            self._spinner = err_console.status("waiting for the job")
            self._spinner.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._spinner is not None:
            self._spinner.stop()
            if self._last is not None:
                err_console.print(Text(self._line(*self._last), style="dim"))

    def polled(self, job: Job) -> None:
        state = (str(job.status), job.attempt_count)
        if state == self._last:
            return
        self._last = state
        line = self._line(*state, job_id=job.job_id)
        if self._spinner is not None:
            self._spinner.update(line)
        else:
            err_console.print(Text(line, style="dim"))

    def _line(self, status: str, attempts: int, job_id: str = "") -> str:
        elapsed = time.monotonic() - self._started
        plural = "" if attempts == 1 else "s"
        return (
            f"{job_id + ' ' if job_id else ''}{status} ({attempts} attempt{plural}, {elapsed:.1f}s)"
        )


def _client(url: str | None, api_key: str | None, retry_for: float) -> Client:
    s = client_settings()
    key = api_key or s.client.api_key
    if not key:
        fail(
            "no API key: set FERRYMAN_API_KEY or pass --api-key "
            "(create one with `ferryman keys create --tenant NAME`)",
            EXIT_USAGE,
        )
    client = Client(
        url or s.client.url,
        key,
        retry_budget_seconds=retry_for,
        wait_for_server=False,
        on_retry=_Retries(),
    )
    return client


def _url_source(url: str) -> str:
    """Where the address came from, to say in an error."""
    if url.rstrip("/") == os.environ.get("FERRYMAN_URL", "").rstrip("/"):
        return "from FERRYMAN_URL"
    if url.rstrip("/") == DEFAULT_URL:
        return "the default address"
    return "from --url or ferryman.toml"


def _explain(exc: ClientError) -> str:
    if isinstance(exc, UnreachableError):
        return (
            f"cannot reach ferryman at {exc.url} ({_url_source(exc.url)}): {exc.reason}. "
            f"Is the server running (`ferryman serve`)? {_HOW_TO_CHANGE}"
        )
    if exc.status is None:
        return exc.message
    parts = [str(exc.status), exc.code, exc.detail or exc.title or ""]
    return " ".join(part for part in parts if part)


class _Failures:
    """Turns the client's errors into a message on stderr and exit 1."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, ClientError) and not isinstance(exc, WaitTimeoutError):
            fail(_explain(exc))


def submit(
    task: Annotated[str, typer.Option(help="A registered task name, e.g. generate.")],
    input: Annotated[str, typer.Option("--input", help="The task input as a JSON object.")],
    model: Annotated[
        str | None, typer.Option(help="Model alias.", show_default="the task's")
    ] = None,
    metadata: Annotated[str | None, typer.Option(help="A JSON object stored with the job.")] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="Reuse to make the submission idempotent.", show_default="a new one"),
    ] = None,
    webhook_url: Annotated[
        str | None,
        typer.Option(
            help="POST the outcome there, signed (create the secret first: "
            "ferryman webhooks secret)."
        ),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the result.")] = False,
    timeout: Annotated[
        float,
        typer.Option(
            min=0, show_default=True, help="Seconds to wait with --wait (exit 3 past it)."
        ),
    ] = 300.0,
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    retry_for: RetryOption = DEFAULT_RETRY_BUDGET_SECONDS,
) -> None:
    """Submit a job; print it, or with --wait its result.

    Prints the job as JSON, or with --wait the result, showing progress on stderr
    (exit 1 if the job failed or was cancelled, printing the job; exit 3 past --timeout)."""
    payload = parse_json_object(input, "--input")
    meta = parse_json_object(metadata, "--metadata") if metadata is not None else None
    with _client(url, api_key, retry_for) as client, _Failures():
        job = client.submit(
            task,
            payload,
            model=model,
            metadata=meta,
            idempotency_key=idempotency_key,
            webhook_url=webhook_url,
        )
        if not wait:
            print_json(job.api_json)
            return
        raise typer.Exit(_wait(client, job.job_id, timeout))


def _wait(client: Client, job_id: str, timeout_seconds: float) -> int:
    try:
        with _WaitProgress() as progress:
            job = client.wait(job_id, timeout=timeout_seconds, on_poll=progress.polled)
    except WaitTimeoutError as exc:
        print_json(exc.job.api_json)
        fail(exc.message, EXIT_WAIT_TIMEOUT)
    if job.status is JobStatus.SUCCEEDED:
        print_json(job.api_json.get("result"))
        return 0
    print_json(job.api_json)
    return EXIT_FAILED


def status(
    job_id: Annotated[
        str | None,
        typer.Argument(
            help="A job id (gen_...), read over the API. Without one: the deployment's "
            "state (readiness, paused switches, queue), read from the database.",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
    as_table: Annotated[
        bool,
        typer.Option(
            "--table",
            help="Show a job as a table. A job is JSON by default, as it always was, "
            "so scripts that read `ferryman status JOB_ID` keep working.",
        ),
    ] = False,
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    retry_for: RetryOption = DEFAULT_RETRY_BUDGET_SECONDS,
) -> None:
    """Show a job as the API's JSON (exit 1 if there is no such job), or without JOB_ID
    the deployment as a table (or --json)."""
    if job_id is None:
        _overview(as_json)
        return
    with _client(url, api_key, retry_for) as client, _Failures():
        job = client.get(job_id)
    _show_job(job, as_json=as_json or not as_table)


@needs_server
def _overview(as_json: bool) -> None:
    from ferryman.cli.control import overview

    overview(as_json)


def _show_job(job: Job, as_json: bool) -> None:
    if as_json:
        print_json(job.api_json)
    else:
        print_table(job_table(job))


def list_jobs(
    status: Annotated[
        JobStatus | None, typer.Option(case_sensitive=False, help="Only jobs in this status.")
    ] = None,
    task: Annotated[str | None, typer.Option(help="Only jobs of this task.")] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=200, show_default=True, help="Jobs per page.")
    ] = 50,
    cursor: Annotated[str | None, typer.Option(help="The next_cursor of a previous page.")] = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    retry_for: RetryOption = DEFAULT_RETRY_BUDGET_SECONDS,
) -> None:
    """Your tenant's jobs, newest first, a page at a time."""
    with _client(url, api_key, retry_for) as client, _Failures():
        page = client.list(status=status, task=task, limit=limit, cursor=cursor)
    if as_json:
        print_json(page.api_json)
        return
    if not page.data:
        err_console.print("No jobs.")
    else:
        print_table(jobs_table(page.data))
    if page.next_cursor:
        err_console.print(
            Text(f"More: ferryman list --cursor {page.next_cursor}", no_wrap=True), soft_wrap=True
        )


def events(
    job_id: JobIdArgument,
    as_json: JsonOption = False,
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    retry_for: RetryOption = DEFAULT_RETRY_BUDGET_SECONDS,
) -> None:
    """A job's history: its events and its attempts (model calls)."""
    with _client(url, api_key, retry_for) as client, _Failures():
        history = client.events(job_id)
    if as_json:
        print_json(history.api_json)
        return
    print_table(events_table(history))
    print_table(attempts_table(history))


def cancel(
    job_id: JobIdArgument,
    as_json: JsonOption = False,
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    retry_for: RetryOption = DEFAULT_RETRY_BUDGET_SECONDS,
) -> None:
    """Cancel a job (exit 1 if it had already finished).

    A running call is stopped within about a second; the job then ends CANCELLED."""
    with _client(url, api_key, retry_for) as client, _Failures():
        job = client.cancel(job_id)
    _show_job(job, as_json)


def webhook_secret(
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    retry_for: RetryOption = DEFAULT_RETRY_BUDGET_SECONDS,
) -> None:
    """Create or rotate this tenant's webhook signing secret and print it (once).

    Keep it where your receiver can read it: ferryman never shows it again. The secret
    it replaces keeps signing beside the new one for 24 hours."""
    with _client(url, api_key, retry_for) as client, _Failures():
        created = client.rotate_webhook_secret()
    typer.echo(created.secret)
    err_console.print(
        "the previous secret, if any, keeps signing beside this one for "
        f"{created.previous_valid_for_seconds // 3600} hours",
        highlight=False,
    )
