"""The Lambda worker: ``ferryman.aws_lambda.handler`` for an SQS event source mapping;
and the Lambda sweeper: ``ferryman.aws_lambda.sweep`` for a schedule.

Configured by the same environment variables as ``ferryman worker``. The mapping must
have ``ReportBatchItemFailures`` on: the handler answers
``{"batchItemFailures": [{"itemIdentifier": messageId}, ...]}`` naming every record
whose outcome is not durable, and the mapping deletes the others (the handler deletes
no message itself). docs/aws.md ("The Lambda worker") says how to deploy it.

- records.py: an SQS event's records as the worker's deliveries;
- batch.py: one invocation's records, run at once, none started without the time to
  finish;
- dispositions.py: which verdicts let a message go;
- event_source.py: the engine's queue and ledger with their deletes withheld;
- container.py: the engine, worker and loop kept by a warm container;
- sweeping.py: the sweeper's rounds, as many as an invocation has time for.
"""

from __future__ import annotations

from typing import Any

from ferryman.aws_lambda.container import BatchResponse, Container
from ferryman.aws_lambda.sweeping import SweepContainer

__all__ = ["handler", "shutdown", "sweep"]

# Made when this module is imported (at the container's init), opened lazily by the
# first invocation, reused by every later one. A function runs one of the two.
_CONTAINER = Container()
_SWEEP_CONTAINER = SweepContainer()


def handler(event: Any, context: Any) -> BatchResponse:
    """The function's entry point. Never raises."""
    return _CONTAINER.invoke(event, context)


def sweep(event: Any, context: Any) -> dict[str, int]:
    """The sweeper function's entry point: rounds while the invocation has time, and
    their counts (sweeping.SweepSummary). Never raises."""
    return _SWEEP_CONTAINER.invoke(event, context)


def shutdown() -> None:
    """Close the engines this container opened (the next invocation opens them again)."""
    try:
        _CONTAINER.close()
    finally:
        _SWEEP_CONTAINER.close()
