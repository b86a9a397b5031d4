"""RQ's side of the peers benchmark: one no-op function (``rq worker-pool`` runs it).

RQ records each job's ``ended_at`` in Redis, which the benchmark reads as the job's
completion time.
"""

from __future__ import annotations


def noop() -> None:
    return None
