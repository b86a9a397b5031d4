"""Observers: everything that watches jobs, behind one seam (docs/architecture.md,
"Adding an observer").

The services do the work; what watches it (metrics, lifecycle logs, failpoints, and
later traces and a webhook outbox) is an observer, called through one ``Observers``
chain that wiring builds. Two kinds of hook:

- ``changed``: every change the ledger applied, whichever service made it (intake,
  worker, sweeper, operator), on every engine; ``completed`` follows it once for a
  change that made the job terminal (``after`` terminal, ``before`` not). Nothing
  else finds completion.
- the worker's steps: a delivery started and ended (or skipped without an attempt),
  an attempt started and ended, each model call started and ended, and ``reached``
  for each named step a failpoint may stop at.

Hooks are plain, synchronous calls on the path of every job: an observer does its
own bookkeeping and returns, and hands anything slow (a network export) to its own
queue or task. An observer that raises is logged and skipped; the job's write has
already happened, so an observer can never undo or block it. A failpoint ends the
process, which is what it is for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from ferryman.observability.logging import describe_exception

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ferryman.core.changes import Change
    from ferryman.core.job import Job
    from ferryman.ports.queue import Delivery
    from ferryman.services.attempt import CallResult, RunningAttempt
    from ferryman.services.verdicts import Skip, Verdict

log = structlog.get_logger("ferryman.observers")


class JobObserver:
    """Watches jobs. Every hook does nothing here: an observer overrides those it needs."""

    def changed(self, change: Change) -> None:
        """A change was applied (written) to its job."""

    def completed(self, change: Change) -> None:
        """The change made its job terminal (called once per completion, after ``changed``)."""

    def delivery_started(self, delivery: Delivery) -> None:
        """A worker took a message and starts handling it."""

    def delivery_skipped(self, delivery: Delivery, job: Job | None, skip: Skip) -> None:
        """The delivery ends without an attempt (a duplicate, an unknown payload)."""

    def delivery_ended(self, delivery: Delivery, verdict: Verdict) -> None:
        """The worker is done with the delivery (every started delivery ends once)."""

    def attempt_started(self, attempt: RunningAttempt) -> None:
        """A claim opened an attempt, which is about to call its model."""

    def attempt_ended(self, attempt: RunningAttempt, result: CallResult, verdict: Verdict) -> None:
        """The attempt's outcome is written (or it lost its job); ``result`` is its call's."""

    def call_started(self, attempt: RunningAttempt, result: CallResult) -> None:
        """The model call starts (``result.model`` and ``result.provider`` are set)."""

    def call_ended(
        self, attempt: RunningAttempt, result: CallResult, elapsed_seconds: float
    ) -> None:
        """The model call returned or failed; ``result`` holds what it gave."""

    def reached(self, point: str) -> None:
        """A named step of a delivery (failpoints.POINTS) was reached."""


# Every hook of JobObserver, as the chain passes them on.
HOOKS = (
    "changed",
    "completed",
    "delivery_started",
    "delivery_skipped",
    "delivery_ended",
    "attempt_started",
    "attempt_ended",
    "call_started",
    "call_ended",
    "reached",
)


class Observers(JobObserver):
    """The chain: each hook is passed to every observer, in the order given."""

    def __init__(self, observers: Iterable[JobObserver] = ()) -> None:
        self._observers = tuple(observers)
        # Per hook, the bound methods of the observers that override it, found once: a
        # hook on every job's path costs a call only for an observer that watches it.
        self._listeners: dict[str, tuple[Callable[..., None], ...]] = {
            hook: tuple(
                getattr(observer, hook)
                for observer in self._observers
                if getattr(type(observer), hook) is not getattr(JobObserver, hook)
            )
            for hook in HOOKS
        }

    def with_observer(self, observer: JobObserver) -> Observers:
        """This chain and one more observer after it."""
        return Observers((*self._observers, observer))

    def changed(self, change: Change) -> None:
        self._tell("changed", change)
        before = change.before
        if change.after.status.terminal and (before is None or not before.status.terminal):
            self._tell("completed", change)

    def delivery_started(self, delivery: Delivery) -> None:
        self._tell("delivery_started", delivery)

    def delivery_skipped(self, delivery: Delivery, job: Job | None, skip: Skip) -> None:
        self._tell("delivery_skipped", delivery, job, skip)

    def delivery_ended(self, delivery: Delivery, verdict: Verdict) -> None:
        self._tell("delivery_ended", delivery, verdict)

    def attempt_started(self, attempt: RunningAttempt) -> None:
        self._tell("attempt_started", attempt)

    def attempt_ended(self, attempt: RunningAttempt, result: CallResult, verdict: Verdict) -> None:
        self._tell("attempt_ended", attempt, result, verdict)

    def call_started(self, attempt: RunningAttempt, result: CallResult) -> None:
        self._tell("call_started", attempt, result)

    def call_ended(
        self, attempt: RunningAttempt, result: CallResult, elapsed_seconds: float
    ) -> None:
        self._tell("call_ended", attempt, result, elapsed_seconds)

    def reached(self, point: str) -> None:
        self._tell("reached", point)

    def _tell(self, hook: str, *facts: object) -> None:
        for listener in self._listeners[hook]:
            try:
                listener(*facts)
            except Exception as exc:  # noqa: BLE001 - watching must never stop the work
                _failed(listener, hook, exc)


def _failed(listener: Callable[..., None], hook: str, exc: Exception) -> None:
    observer = getattr(listener, "__self__", listener)
    # Identifiers only: an exception's message may quote a job's input.
    log.warning(
        "observer.failed", observer=type(observer).__name__, hook=hook, **describe_exception(exc)
    )
