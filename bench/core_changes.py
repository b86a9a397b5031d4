"""What one change costs in core: microseconds per call of core/changes.py's main
transitions, and how many copies of the job each makes.

Each transition is called on a job in the state it starts from (made once, outside the
timing), ``--number`` times per repeat; the figure is the best of ``--repeats`` repeats
in µs per call, with the garbage collector off, as ``timeit`` reports it (the least
disturbed by other work on a shared machine). Copies are counted in one extra call,
with a profiler: calls of ``Job.__init__`` (what ``dataclasses.replace`` makes a copy
with) and of a generated copy function (``replace_Job``, in builds that had one).

Another build is measured by putting its ``src`` first on ``PYTHONPATH``. ``--builds
old=/tmp/ferryman-old/src,new=src`` runs this script once per build per round, in an
order alternated by round, and reports each build's median over ``--rounds``.

Run: ``.venv/bin/python bench/core_changes.py [--json]``, or for a before/after pair
``git worktree add --detach /tmp/ferryman-core-old <commit>`` then
``.venv/bin/python bench/core_changes.py --builds old=/tmp/ferryman-core-old/src,new=src
--rounds 5 --json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

    from ferryman.core.changes import Change

NOW = 1_700_000_100.0
OWNER = "att_owner"


def _transitions() -> dict[str, Callable[[], Change | None]]:
    """Each transition, bound to a job in the state it starts from."""
    from ferryman.core import changes
    from ferryman.core.errors import FailureClass
    from ferryman.core.job import (
        AttemptOutcome,
        AttemptReport,
        DispatchState,
        Job,
        JobError,
        JobStatus,
    )

    new = Job(
        tenant_id="bench",
        job_id="gen_01BENCH",
        task="generate",
        model="sim",
        input={"prompt": "hi"},
        request_hash="0" * 64,
        created_at=NOW - 10,
        updated_at=NOW - 10,
        correlation_id="cor_bench",
        idempotency_key="key-1",
    )
    waiting = changes.accept(new, now=NOW - 10, dispatched=True).after
    # An attempt whose lease ran out, on a job whose deliveries keep dying.
    expired = dataclasses.replace(
        waiting,
        status=JobStatus.PROCESSING,
        attempt_id="att_gone",
        lease_until=NOW - 1,
        deliveries_without_outcome=2,
    )
    owned = changes.claim(
        waiting,
        attempt_id=OWNER,
        worker_id="w1",
        now=NOW - 5,
        lease_until=NOW + 60,
        max_deliveries_without_outcome=10,
    ).after
    report = AttemptReport(outcome=AttemptOutcome.SUCCEEDED, latency_ms=5, input_tokens=3)
    retry = AttemptReport(outcome=AttemptOutcome.RETRY, failure_class=FailureClass.TRANSIENT)
    error = JobError(code="timeout", failure_class=FailureClass.TRANSIENT, message="slow")
    pending = dataclasses.replace(waiting, dispatch_state=DispatchState.PENDING)
    return {
        "accept": lambda: changes.accept(new, now=NOW, dispatched=True),
        "mark_dispatched": lambda: changes.mark_dispatched(pending, now=NOW, redispatch=False),
        "claim": lambda: changes.claim(
            waiting,
            attempt_id="att_new",
            worker_id="w1",
            now=NOW,
            lease_until=NOW + 60,
            max_deliveries_without_outcome=10,
        ),
        "renew_lease": lambda: changes.renew_lease(
            owned, attempt_id=OWNER, now=NOW, lease_until=NOW + 90
        ),
        "succeed": lambda: changes.succeed(
            owned, attempt_id=OWNER, now=NOW, result_ref="results/x", report=report
        ),
        "schedule_retry": lambda: changes.schedule_retry(
            owned, attempt_id=OWNER, now=NOW, not_before=NOW + 5, error=error, report=retry
        ),
        # A takeover that dead-letters the job: several copies before this change.
        "claim_dead_letter": lambda: changes.claim(
            expired,
            attempt_id="att_new",
            worker_id="w1",
            now=NOW,
            lease_until=NOW + 60,
            max_deliveries_without_outcome=3,
        ),
    }


def _copies(call: Callable[[], object]) -> int:
    """Copies of a Job one call makes: Job.__init__ runs, or a generated copy function."""
    from ferryman.core.job import Job

    made = 0

    def count(frame: FrameType, event: str, _arg: object) -> None:
        nonlocal made
        if event != "call":
            return
        name = frame.f_code.co_name
        if name.startswith("replace_Job") or (
            name == "__init__" and type(frame.f_locals.get("self")) is Job
        ):
            made += 1

    sys.setprofile(count)
    try:
        call()
    finally:
        sys.setprofile(None)
    return made


def _best_us(call: Callable[[], object], *, number: int, repeats: int) -> float:
    best = float("inf")
    gc.disable()
    try:
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(number):
                call()
            best = min(best, time.perf_counter() - start)
    finally:
        gc.enable()
    return best / number * 1e6


def measure(*, number: int, repeats: int) -> dict[str, Any]:
    import ferryman

    figures: dict[str, Any] = {}
    for name, call in _transitions().items():
        call()  # warm
        figures[name] = {
            "us_per_change": _best_us(call, number=number, repeats=repeats),
            "copies": _copies(call),
        }
    figures["_build"] = {"source": os.path.dirname(ferryman.__file__)}
    return figures


def compare(
    builds: dict[str, str], *, rounds: int, number: int, repeats: int
) -> dict[str, dict[str, Any]]:
    """Each build in its own process, alternated by round; medians over the rounds."""
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in builds}
    labels = list(builds)
    for r in range(rounds):
        for label in labels[r % 2 :] + labels[: r % 2]:
            env = {**os.environ, "PYTHONPATH": os.path.abspath(builds[label])}
            argv = [sys.executable, __file__, "--json", "--number", str(number)]
            done = subprocess.run(
                [*argv, "--repeats", str(repeats)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            runs[label].append(json.loads(done.stdout))
    result: dict[str, dict[str, Any]] = {}
    for label, figures in runs.items():
        names = [name for name in figures[0] if not name.startswith("_")]
        result[label] = {
            name: {
                "us_per_change": statistics.median(f[name]["us_per_change"] for f in figures),
                "us_min_max": [
                    min(f[name]["us_per_change"] for f in figures),
                    max(f[name]["us_per_change"] for f in figures),
                ],
                "copies": figures[0][name]["copies"],
            }
            for name in names
        }
        result[label]["_build"] = figures[0]["_build"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--number", type=int, default=5000, help="calls per repeat")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--builds", help="label=src,label=src: compare builds, alternated")
    parser.add_argument("--rounds", type=int, default=5, help="with --builds")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()
    if args.builds:
        builds = dict(item.split("=", 1) for item in args.builds.split(","))
        result: dict[str, Any] = compare(
            builds, rounds=args.rounds, number=args.number, repeats=args.repeats
        )
    else:
        result = measure(number=args.number, repeats=args.repeats)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    tables = result if args.builds else {"this build": result}
    for label, figures in tables.items():
        print(f"{label} ({figures['_build']['source']})")
        for name, row in figures.items():
            if not name.startswith("_"):
                print(f"  {name:<18} {row['us_per_change']:7.2f} µs  copies {row['copies']}")


if __name__ == "__main__":
    main()
