"""moto's server, its DynamoDB made atomic per request: run as ``python moto_serialized.py``.

DynamoDB serializes the items a transaction touches, and applies a conditional write
atomically; moto's threaded server does neither (its TransactWriteItems checks every
condition, then writes, with no lock), so two concurrent creates with one idempotency
key could both succeed on it, as they never do on AWS. Each DynamoDB operation here
holds one lock, which makes the emulator as atomic as the service. SQS is left as
moto runs it: a long poll must not hold the emulator.
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any


def serialize_dynamodb() -> None:
    from moto.dynamodb.models import DynamoDBBackend

    lock = threading.RLock()
    for name, original in list(vars(DynamoDBBackend).items()):
        if name.startswith("_") or not callable(original):
            continue

        def locked(*args: Any, __original: Any = original, **kwargs: Any) -> Any:
            with lock:
                return __original(*args, **kwargs)

        setattr(DynamoDBBackend, name, functools.wraps(original)(locked))


if __name__ == "__main__":
    from moto.server import main

    serialize_dynamodb()
    main(sys.argv[1:])
