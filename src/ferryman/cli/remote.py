"""Commands that talk to a running API over HTTP, as any client would: submit, status.

An API that cannot be reached is said on stderr at once, with where the address
comes from, while the client keeps retrying for its budget (an API restart should
cost a user a wait, not a lost submission). ``submit --wait`` shows on stderr each
status the job goes through.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from ferryman.cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    EXIT_WAIT_TIMEOUT,
    err_console,
    fail,
    parse_json_object,
    print_json,
    run,
    settings,
)
from ferryman.client import DEFAULT_RETRY_BUDGET_SECONDS, Client, ClientError, WaitTimeoutError

if TYPE_CHECKING:
    from ferryman.client import RetryNotice
    from ferryman.config import Settings

UrlOption = Annotated[str | None, typer.Option("--url", help="API address [default: FERRYMAN_URL]")]
ApiKeyOption = Annotated[
    str | None, typer.Option("--api-key", help="API key [default: FERRYMAN_API_KEY]")
]
RetryOption = Annotated[
    float,
    typer.Option(
        "--retry-for",
        min=0,
        help="Seconds to keep retrying while the API is unreachable or busy (0: never).",
    ),
]
_WHERE_THE_URL_COMES_FROM = "set FERRYMAN_URL or pass --url to use another address"
# After the first "cannot reach", a reminder at most this often while retries go on.
_REMIND_EVERY_SECONDS = 5.0


class _Progress:
    """What the user sees on stderr while the client retries and waits."""

    def __init__(self) -> None:
        self._said_unreachable_at: float | None = None
        self._status: str | None = None
        self._started = time.monotonic()

    def retrying(self, notice: RetryNotice) -> None:
        if not notice.unreachable:
            message = (
                f"{notice.base_url} answered {notice.error}; "
                f"retrying in {notice.delay_seconds:.1f}s"
            )
        elif self._said_unreachable_at is None:
            message = (
                f"cannot reach ferryman at {notice.base_url} ({notice.error}); "
                f"retrying for up to {notice.budget_seconds:g}s ({_WHERE_THE_URL_COMES_FROM})"
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

    def polled(self, job: dict[str, Any]) -> None:
        status = str(job.get("status"))
        if status != self._status:
            self._status = status
            elapsed = time.monotonic() - self._started
            err_console.print(Text(f"{job.get('job_id')} {status} ({elapsed:.1f}s)", style="dim"))


def _client(
    s: Settings, url: str | None, api_key: str | None, retry_for: float, progress: _Progress
) -> Client:
    key = api_key or s.api_key
    if not key:
        fail(
            "no API key: set FERRYMAN_API_KEY or pass --api-key "
            "(create one with `ferryman keys create --tenant NAME`)",
            EXIT_USAGE,
        )
    return Client(url or s.url, key, retry_budget_seconds=retry_for, on_retry=progress.retrying)


def _problem(exc: ClientError) -> str:
    parts = [str(exc.status) if exc.status else "", exc.code, exc.detail or exc.title or ""]
    if exc.status is None:
        if exc.code == "unreachable":
            return f"{exc.message}; {_WHERE_THE_URL_COMES_FROM}"
        return exc.message
    return " ".join(part for part in parts if part)


def submit(
    task: Annotated[str, typer.Option(help="A registered task name, e.g. generate.")],
    input: Annotated[str, typer.Option("--input", help="The task input as a JSON object.")],
    model: Annotated[str | None, typer.Option(help="Model [default: the task's]")] = None,
    metadata: Annotated[str | None, typer.Option(help="A JSON object stored with the job.")] = None,
    idempotency_key: Annotated[
        str | None, typer.Option(help="Reuse to make the submission idempotent [default: new]")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the result.")] = False,
    timeout: Annotated[
        float, typer.Option(min=0, help="Seconds to wait with --wait (exit 3 past it).")
    ] = 300.0,
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    retry_for: RetryOption = DEFAULT_RETRY_BUDGET_SECONDS,
) -> None:
    """Submit a job. Prints the job, or with --wait the result (exit 1 if the job failed).

    Retries (one Idempotency-Key, so never a second job) while the API is unreachable
    or busy, for --retry-for seconds, saying so on stderr."""
    payload = parse_json_object(input, "--input")
    meta = parse_json_object(metadata, "--metadata") if metadata is not None else None
    progress = _Progress()
    client = _client(settings(), url, api_key, retry_for, progress)
    request = {"task": task, "input": payload, "model": model, "metadata": meta}
    raise typer.Exit(
        run(
            _submit(
                client,
                request,
                idempotency_key,
                timeout_seconds=timeout if wait else None,
                progress=progress,
            )
        )
    )


async def _submit(
    client: Client,
    request: dict[str, Any],
    idempotency_key: str | None,
    *,
    timeout_seconds: float | None,
    progress: _Progress,
) -> int:
    async with client:
        try:
            job = await client.submit(
                request["task"],
                request["input"],
                model=request["model"],
                metadata=request["metadata"],
                idempotency_key=idempotency_key,
            )
            if timeout_seconds is None:
                print_json(job)
                return 0
            return await _wait(client, job["job_id"], timeout_seconds, progress)
        except ClientError as exc:
            fail(_problem(exc))


async def _wait(client: Client, job_id: str, timeout_seconds: float, progress: _Progress) -> int:
    try:
        job = await client.wait(job_id, timeout_seconds=timeout_seconds, on_poll=progress.polled)
    except WaitTimeoutError as exc:
        print_json(exc.job)
        fail(exc.message, EXIT_WAIT_TIMEOUT)
    if job.get("status") == "SUCCEEDED":
        print_json(job.get("result"))
        return 0
    print_json(job)
    return EXIT_FAILED


def status(
    job_id: Annotated[str, typer.Argument(help="The job id (gen_...).")],
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    retry_for: RetryOption = DEFAULT_RETRY_BUDGET_SECONDS,
) -> None:
    """Print a job as JSON (exit 1 if there is no such job)."""
    client = _client(settings(), url, api_key, retry_for, _Progress())
    run(_status(client, job_id))


async def _status(client: Client, job_id: str) -> None:
    async with client:
        try:
            print_json(await client.get(job_id))
        except ClientError as exc:
            fail(_problem(exc))
