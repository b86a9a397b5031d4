"""Which records of a batch the event source mapping may delete: the verdict table.

The mapping deletes every record the function does not name in ``batchItemFailures``.
So a record is named unless its message may go: the job's outcome is durable and no
later delivery of this message is needed to drive it. ``ferryman worker`` makes the
same decision by deleting the message itself (an ack, only after the outcome is
stored); here the worker's delete is withheld (event_source.py) and this table decides,
with the delete the worker asked for as its witness where a verdict alone cannot tell.
"""

from __future__ import annotations

import enum

from ferryman.services.verdicts import Verdict


class Disposition(enum.Enum):
    """What a verdict says of its message."""

    # Durable, and nothing more to drive: the mapping may delete the message.
    GOES = "goes"
    # Not durable, or the message itself still drives the job: it is named a failure,
    # so it stays in the queue (hidden for as long as the worker asked).
    STAYS = "stays"
    # The verdict covers both: the message goes only if the worker acknowledged it.
    AS_ACKNOWLEDGED = "as_acknowledged"


_TABLE: dict[Verdict, Disposition] = {
    # A published result, a durable failure (a dead-lettered job is a failed one), a
    # cancel that finished the job: terminal, and a later delivery would be a duplicate.
    Verdict.SUCCEEDED: Disposition.GOES,
    Verdict.FAILED: Disposition.GOES,
    Verdict.DEAD_LETTERED: Disposition.GOES,
    Verdict.CANCELLED: Disposition.GOES,
    # A job already finished (or gone), acknowledged without calling the model.
    Verdict.DUPLICATE: Disposition.GOES,
    # The retry is recorded, but THIS message carries it: the worker hid it until the
    # job is due (services/delivery.py, I5). Deleted, the retry would wait for the
    # sweeper's stalled scan instead of starting when due.
    Verdict.RETRY_SCHEDULED: Disposition.STAYS,
    # Another attempt owns the job now, or ours gave it back: this delivery recorded no
    # outcome, and the message is what brings the job to its next owner.
    Verdict.LEASE_LOST: Disposition.STAYS,
    Verdict.RELEASED: Disposition.STAYS,
    # Deferred: hidden for later (a job not yet due, another attempt's job, a payload
    # this worker cannot read), which must stay; or put back as a new message (a paused
    # provider: the new one carries the job, and the worker acknowledged this one).
    Verdict.DEFERRED: Disposition.AS_ACKNOWLEDGED,
}


def disposition(verdict: Verdict) -> Disposition:
    """The table's entry for ``verdict`` (every verdict has one: a test holds it)."""
    return _TABLE[verdict]


def message_may_go(verdict: Verdict, *, acknowledged: bool) -> bool:
    """May the event source mapping delete the message of a delivery that ended so?
    ``acknowledged``: the worker asked to delete it (withheld, event_source.py)."""
    entry = _TABLE[verdict]
    if entry is Disposition.AS_ACKNOWLEDGED:
        return acknowledged
    return entry is Disposition.GOES
