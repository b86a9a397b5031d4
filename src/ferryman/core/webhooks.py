"""The rules of completion webhooks: what an event is called, what a receiver's answer
means, and when the next attempt is due.

A job submitted with a ``webhook_url`` owes one notification per outcome (the change
that finishes it writes that debt on the job: core/changes.py). The notification is a
Standard Webhooks message: its id is the same on every attempt, its body the job as
``GET`` shows it, and each attempt is signed anew with its own timestamp.
"""

from __future__ import annotations

from ferryman.core.job import Job, JobStatus

# The retry schedule's default: seconds after a failed attempt, one per retry (about
# 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h: a day and a few hours in all).
DEFAULT_RETRY_SCHEDULE: tuple[float, ...] = (5, 300, 1_800, 7_200, 18_000, 36_000, 36_000)
# How long one delivery attempt may take, connect to last byte of the answer's head.
DELIVERY_TIMEOUT_SECONDS = 10.0
# How long a dispatcher owns a claimed attempt before another may take it over: the
# delivery timeout with room for resolving the name and for recording the outcome.
CLAIM_SECONDS = 30.0
# Gone: the receiver asks never to be called again for this notification.
GONE = 410

EVENT_TYPES = {
    JobStatus.SUCCEEDED: "generation.succeeded",
    JobStatus.FAILED: "generation.failed",
    JobStatus.CANCELLED: "generation.cancelled",
}


def webhook_id(job_id: str, event_seq: int) -> str:
    """The ``webhook-id`` of the notification about the job's event ``event_seq``: the
    same on every attempt, different for a replayed job's next outcome."""
    return f"msg_{job_id}_{event_seq}"


def event_type(job: Job) -> str:
    """The event's ``type`` for a finished job."""
    return EVENT_TYPES[job.status]


def delivered(status_code: int | None) -> bool:
    """A 2xx answer delivers the notification."""
    return status_code is not None and 200 <= status_code < 300


def next_attempt_at(
    *, attempts_made: int, status_code: int | None, now: float, schedule: tuple[float, ...]
) -> float | None:
    """When the next attempt is due after ``attempts_made`` failed ones, or None when
    there is none: the receiver answered 410 Gone, or the schedule is spent."""
    if status_code == GONE or attempts_made > len(schedule):
        return None
    return now + schedule[attempts_made - 1]


def parse_schedule(text: str) -> tuple[float, ...]:
    """``FERRYMAN_WEBHOOK_RETRY_SCHEDULE``: seconds between attempts, comma-separated,
    each a positive number (an empty text: no retries). ValueError says what is wrong."""
    if not text.strip():
        return ()
    schedule: list[float] = []
    for part in text.split(","):
        try:
            seconds = float(part.strip())
        except ValueError:
            raise ValueError(
                f"{part.strip()!r} is not a number of seconds (expected e.g. '5,300,1800')"
            ) from None
        if not seconds > 0 or seconds == float("inf"):
            raise ValueError(f"{part.strip()!r}: each wait must be a positive number of seconds")
        schedule.append(seconds)
    return tuple(schedule)
