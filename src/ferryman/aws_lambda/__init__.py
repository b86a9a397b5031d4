"""The Lambda worker: ``ferryman.aws_lambda.handler`` for an SQS event source mapping.

Configured by the same environment variables as ``ferryman worker``. The mapping must
have ``ReportBatchItemFailures`` on: the handler answers
``{"batchItemFailures": [{"itemIdentifier": messageId}, ...]}`` naming every record
whose outcome is not durable, and the mapping deletes the others (the handler deletes
no message itself). docs/aws-lambda.md says how to deploy it.

- records.py: an SQS event's records as the worker's deliveries;
- batch.py: one invocation's records, run at once, none started without the time to
  finish;
- dispositions.py: which verdicts let a message go;
- event_source.py: the engine's queue and ledger with their deletes withheld;
- container.py: the engine, worker and loop kept by a warm container.
"""

from __future__ import annotations

from typing import Any

from ferryman.aws_lambda.container import BatchResponse, Container

__all__ = ["handler", "shutdown"]

# Made when this module is imported (at the container's init), opened lazily by the
# first invocation, reused by every later one.
_CONTAINER = Container()


def handler(event: Any, context: Any) -> BatchResponse:
    """The function's entry point. Never raises."""
    return _CONTAINER.invoke(event, context)


def shutdown() -> None:
    """Close the engine this container opened (the next invocation opens it again)."""
    _CONTAINER.close()
