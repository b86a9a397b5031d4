"""What the client raises, all under ``ClientError`` (itself a ``FerrymanError``).

ClientError                  the API refused the request (``status``, ``code``, ``problem``)
├── UnreachableError         no answer from the API at all (``url``)
├── WaitTimeoutError         a wait ran out before its job(s) finished (``job``, ``unfinished``,
│                            ``finished``); also a TimeoutError, as concurrent.futures raises
├── JobFailedError           the job ended FAILED (``job``, ``failure_class``, ``error_code``)
└── JobCancelledError        the job ended CANCELLED (``job``)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ferryman.core.errors import FerrymanError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import httpx

    from ferryman.client.models import Job
    from ferryman.core.errors import FailureClass


class ClientError(FerrymanError):
    """The ferryman API refused the request or could not be reached."""

    code = "client_error"

    def __init__(
        self,
        message: str | None = None,
        *,
        status: int | None = None,
        code: str | None = None,
        title: str | None = None,
        detail: str | None = None,
        problem: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message or detail or title)
        self.status = status
        self.code = code or type(self).code  # type: ignore[misc]
        self.title = title
        self.detail = detail
        self.problem: dict[str, Any] = problem or {}

    @classmethod
    def from_response(cls, response: httpx.Response) -> ClientError:
        """The RFC 9457 problem the API answered, as an exception."""
        problem = _problem_of(response)
        return cls(
            f"{response.status_code} {problem.get('title', response.reason_phrase)}: "
            f"{problem.get('detail', '')}".rstrip(": "),
            status=response.status_code,
            code=str(problem.get("code", f"http_{response.status_code}")),
            title=problem.get("title"),
            detail=problem.get("detail"),
            problem=problem,
        )


class UnreachableError(ClientError):
    """The ferryman API could not be reached."""

    code = "unreachable"

    def __init__(self, message: str, *, url: str, reason: str) -> None:
        super().__init__(message, code=type(self).code)
        self.url = url
        self.reason = reason  # the network error: "ConnectError", "ReadTimeout", ...


class WaitTimeoutError(ClientError, TimeoutError):
    """The wait ran out before the job (or jobs) finished."""

    code = "wait_timeout"

    def __init__(
        self,
        job: Job,
        timeout_seconds: float,
        *,
        unfinished: Sequence[Job] | None = None,
        finished: Mapping[str, Job] | None = None,
    ) -> None:
        """``job``: the (first) unfinished job as last seen; for a wait on many jobs,
        ``unfinished`` lists each unfinished one as last seen and ``finished`` holds the
        jobs that had finished, by id."""
        self.job = job
        self.unfinished: list[Job] = [job] if unfinished is None else list(unfinished)
        self.finished: dict[str, Job] = dict(finished or {})
        if unfinished is None:
            message = f"job {job.job_id} still {job.status} after {timeout_seconds:g}s"
        else:
            total = len(self.unfinished) + len(self.finished)
            message = (
                f"{len(self.unfinished)} (of {total}) jobs unfinished after {timeout_seconds:g}s"
            )
        super().__init__(message)


class JobFailedError(ClientError):
    """The job failed."""

    code = "job_failed"

    def __init__(self, job: Job) -> None:
        error = job.error
        why = f"{error.failure_class} ({error.code}): {error.message}" if error else "no reason"
        super().__init__(f"job {job.job_id} FAILED: {why}")
        self.job = job
        self.failure_class: FailureClass | str | None = error.failure_class if error else None
        self.error_code: str | None = error.code if error else None


class JobCancelledError(ClientError):
    """The job was cancelled."""

    code = "job_cancelled"

    def __init__(self, job: Job) -> None:
        super().__init__(f"job {job.job_id} was CANCELLED")
        self.job = job


def _problem_of(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        return body
    return {"title": response.reason_phrase, "status": response.status_code}
