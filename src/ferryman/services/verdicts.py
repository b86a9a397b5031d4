"""What became of a delivery, and why one ended without an attempt."""

from __future__ import annotations

import enum


class Verdict(enum.StrEnum):
    """What became of a delivery (for tests, logs and observers)."""

    SUCCEEDED = "succeeded"
    RETRY_SCHEDULED = "retry_scheduled"
    FAILED = "failed"
    DEAD_LETTERED = "dead_lettered"
    CANCELLED = "cancelled"
    LEASE_LOST = "lease_lost"
    RELEASED = "released"
    DUPLICATE = "duplicate"
    DEFERRED = "deferred"


class Skip(enum.StrEnum):
    """Why a delivery ended without opening an attempt, where no change says so."""

    # Its job is gone or finished: nothing to run (its history is not written to).
    DUPLICATE = "duplicate"
    # Its payload is of a layout this worker does not know (a newer version's).
    UNKNOWN_PAYLOAD = "unknown_payload"
    # Its receipt's visibility cannot be extended long enough for an attempt to finish
    # (SQS: 12 hours from the receive): let go for a receive that can.
    NO_TIME = "no_time"
