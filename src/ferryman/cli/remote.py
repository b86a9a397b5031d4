"""Commands that talk to a running API over HTTP, as any client would: submit, status."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from ferryman.cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    EXIT_WAIT_TIMEOUT,
    fail,
    parse_json_object,
    print_json,
    run,
    settings,
)
from ferryman.client import Client, ClientError, WaitTimeoutError

if TYPE_CHECKING:
    from ferryman.config import Settings

UrlOption = Annotated[str | None, typer.Option("--url", help="API address [default: FERRYMAN_URL]")]
ApiKeyOption = Annotated[
    str | None, typer.Option("--api-key", help="API key [default: FERRYMAN_API_KEY]")
]


def _client(s: Settings, url: str | None, api_key: str | None) -> Client:
    key = api_key or s.api_key
    if not key:
        fail(
            "no API key: set FERRYMAN_API_KEY or pass --api-key "
            "(create one with `ferryman keys create --tenant NAME`)",
            EXIT_USAGE,
        )
    return Client(url or s.url, key)


def _problem(exc: ClientError) -> str:
    parts = [str(exc.status) if exc.status else "", exc.code, exc.detail or exc.title or ""]
    if exc.status is None:
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
) -> None:
    """Submit a job. Prints the job, or with --wait the result (exit 1 if the job failed)."""
    payload = parse_json_object(input, "--input")
    meta = parse_json_object(metadata, "--metadata") if metadata is not None else None
    client = _client(settings(), url, api_key)
    request = {"task": task, "input": payload, "model": model, "metadata": meta}
    raise typer.Exit(
        run(_submit(client, request, idempotency_key, timeout_seconds=timeout if wait else None))
    )


async def _submit(
    client: Client,
    request: dict[str, Any],
    idempotency_key: str | None,
    *,
    timeout_seconds: float | None,
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
            return await _wait(client, job["job_id"], timeout_seconds)
        except ClientError as exc:
            fail(_problem(exc))


async def _wait(client: Client, job_id: str, timeout_seconds: float) -> int:
    try:
        job = await client.wait(job_id, timeout_seconds=timeout_seconds)
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
) -> None:
    """Print a job as JSON (exit 1 if there is no such job)."""
    client = _client(settings(), url, api_key)
    run(_status(client, job_id))


async def _status(client: Client, job_id: str) -> None:
    async with client:
        try:
            print_json(await client.get(job_id))
        except ClientError as exc:
            fail(_problem(exc))
