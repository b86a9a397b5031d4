"""What a cancelled TransactWriteItems says about each of its items.

A transaction whose condition does not hold fails as a whole with
TransactionCanceledException; its CancellationReasons list one entry per item, in
the order the items were sent: ``"None"`` for an item that was fine,
``"ConditionalCheckFailed"`` (with the item as it was, when the item asked for
``ReturnValuesOnConditionCheckFailure=ALL_OLD``), ``"TransactionConflict"`` when
another write held the item at that moment. The stores read these to tell "the
state said no" from "try again".
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any

from ferryman.adapters.aws.errors import error_code

CONDITION_FAILED = "ConditionalCheckFailed"
# How many times an optimistic write (read, decide, write conditioned on what was
# read) is tried before the caller is told the store is too busy to decide now. Forty
# leases of one bucket at once (tests/integration/aws) take up to 10 tries on the
# emulator; a real bucket sees one lease at a time per API process.
MAX_ATTEMPTS = 20
_FIRST_BACKOFF_SECONDS = 0.005
_MAX_BACKOFF_SECONDS = 0.25


@dataclass(frozen=True, slots=True)
class Reason:
    code: str  # "None" when this item was not why the transaction was cancelled
    old: dict[str, Any] | None  # the item as it was, when ALL_OLD was asked and it existed


def cancellation_reasons(exc: BaseException) -> list[Reason] | None:
    """The per-item reasons of a cancelled transaction; None for any other error."""
    if error_code(exc) != "TransactionCanceledException":
        return None
    response: Any = getattr(exc, "response", {})
    reasons = response.get("CancellationReasons") or []
    return [Reason(str(r.get("Code", "None")), r.get("Item")) for r in reasons]


def condition_failed(exc: BaseException) -> bool:
    """A single-item write whose ConditionExpression did not hold."""
    return error_code(exc) == "ConditionalCheckFailedException"


async def back_off(attempt: int) -> None:
    """Wait before optimistic try ``attempt + 1``: full jitter, so writers that
    collided once spread out instead of colliding again in step."""
    cap = min(_MAX_BACKOFF_SECONDS, _FIRST_BACKOFF_SECONDS * 2**attempt)
    await asyncio.sleep(random.uniform(0, cap))  # jitter, not secrecy
