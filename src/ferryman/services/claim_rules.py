"""What a claim asks and what it comes to: the claim rule of core, as the ledger applies it.

``JobLedger.claim`` and ``claim_many`` (services/ledger.py) apply the rule made here,
and an engine that claims in its own receive (ports/queue.py's ClaimsOnReceive) is
handed the same rule's change (``JobLedger.claim_change``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferryman.core import changes
from ferryman.core.errors import IllegalTransitionError

if TYPE_CHECKING:
    from collections.abc import Callable

    from ferryman.core.changes import Change
    from ferryman.core.job import Job


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """The job after a claim, or as found when it could not be claimed.

    ``dead_lettered``: instead of a new attempt, the claim found that too many
    deliveries had ended without an outcome and failed the job (core.changes.claim).
    """

    job: Job
    claimed: bool
    abandoned_attempt_id: str | None = None
    dead_lettered: bool = False


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """One claim of ``claim_many``: the job as the worker read it, and the new attempt."""

    known: Job
    attempt_id: str
    worker_id: str
    now: float
    lease_until: float
    max_deliveries_without_outcome: int


def claim_rule(
    *,
    attempt_id: str,
    worker_id: str,
    now: float,
    lease_until: float,
    max_deliveries_without_outcome: int,
) -> Callable[[Job], Change | None]:
    def rule(job: Job) -> Change | None:
        try:
            return changes.claim(
                job,
                attempt_id=attempt_id,
                worker_id=worker_id,
                now=now,
                lease_until=lease_until,
                max_deliveries_without_outcome=max_deliveries_without_outcome,
            )
        except IllegalTransitionError:
            return None

    return rule


def requested_rule(request: ClaimRequest) -> Callable[[Job], Change | None]:
    return claim_rule(
        attempt_id=request.attempt_id,
        worker_id=request.worker_id,
        now=request.now,
        lease_until=request.lease_until,
        max_deliveries_without_outcome=request.max_deliveries_without_outcome,
    )


def claim_result(job: Job, change: Change | None) -> ClaimResult:
    if change is None:
        return ClaimResult(job=job, claimed=False)
    abandoned = change.closed[0].attempt_id if change.closed else None
    if change.opened is None:
        return ClaimResult(
            job=job, claimed=False, abandoned_attempt_id=abandoned, dead_lettered=True
        )
    return ClaimResult(job=job, claimed=True, abandoned_attempt_id=abandoned)
