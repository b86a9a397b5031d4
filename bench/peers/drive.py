"""The producer of one peer run: submit N no-op jobs, wait for them, report one JSON line.

Run by the peers' virtualenv: ``python drive.py SYSTEM --jobs N --tag TAG``. It
prints ``{"first_submit": ..., "last_submit": ..., "last_completion": ...,
"completed": ..., "producer_cpu_s": ...}`` (epoch seconds). The producer's CPU is its
own over the submit loop only: waiting for completion is the benchmark's instrument,
not work the system asks of a producer. Completion times are each system's own
record of when a job finished, so the polling interval does not inflate them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

# A system's run: the submit loop (returning the job ids) and the completion check
# (given unfinished ids, the completion times of those now finished).
Run = tuple["Callable[[], list[str]]", "Callable[[list[str]], dict[str, float]]"]

POLL_SECONDS = 0.05
TIMEOUT_SECONDS = 600.0
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")
DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "")


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def epoch(value: str | datetime) -> float:
    """An ISO 8601 time or a datetime (naive means UTC, as Celery and RQ write them)."""
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def wait_for(done: Callable[[list[str]], dict[str, float]], ids: Sequence[str]) -> list[float]:
    """Poll ``done`` with the ids not yet finished until all are; their completion times."""
    pending = list(ids)
    finished: dict[str, float] = {}
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while pending:
        finished.update(done(pending))
        pending = [i for i in pending if i not in finished]
        if not pending:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} of {len(ids)} jobs unfinished")
        time.sleep(POLL_SECONDS)
    return list(finished.values())


def finished() -> None:
    """Tell the benchmark every job is done, and wait until it has read the CPU counters."""
    print("FINISHED", flush=True)
    sys.stdin.readline()


def chunks(items: Sequence[str], size: int = 1000) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# --- one section per system: submit(n) -> ids, and done(ids) -> {id: completed_at} -----


def celery_run(n: int, tag: str) -> Run:
    import redis
    from noop_celery import app, noop

    def submit() -> list[str]:
        return [noop.apply_async().id for _ in range(n)]

    backend = redis.Redis.from_url(REDIS_URL)

    def done(ids: list[str]) -> dict[str, float]:
        found: dict[str, float] = {}
        for part in chunks(ids):
            metas = backend.mget([f"celery-task-meta-{i}" for i in part])
            for job_id, raw in zip(part, metas, strict=True):
                if raw is None:
                    continue
                meta = json.loads(raw)
                if meta["status"] != "SUCCESS":
                    raise RuntimeError(f"celery job {job_id} ended {meta['status']}")
                found[job_id] = epoch(meta["date_done"])
        return found

    del app, tag  # imported for its configuration; tags are not needed here
    return submit, done


def rq_run(n: int, tag: str) -> Run:
    import redis
    from noop_rq import noop
    from rq import Queue
    from rq.job import Job, JobStatus

    connection = redis.Redis.from_url(REDIS_URL)
    queue = Queue("bench", connection=connection)

    def submit() -> list[str]:
        return [queue.enqueue(noop).id for _ in range(n)]

    def done(ids: list[str]) -> dict[str, float]:
        found: dict[str, float] = {}
        for part in chunks(ids):
            for job in Job.fetch_many(list(part), connection=connection):
                if job is None:
                    continue
                status = job.get_status(refresh=False)
                if status == JobStatus.FINISHED and job.ended_at is not None:
                    found[job.id] = epoch(job.ended_at)
                elif status in (JobStatus.FAILED, JobStatus.CANCELED, JobStatus.STOPPED):
                    raise RuntimeError(f"rq job {job.id} ended {status}")
        return found

    del tag
    return submit, done


def dbos_run(n: int, tag: str) -> Run:
    import sqlalchemy as sa
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=DATABASE_URL)
    engine = sa.create_engine(DATABASE_URL.replace("postgresql://", "postgresql+psycopg://"))

    def submit() -> list[str]:
        for i in range(n):
            client.enqueue(
                {"queue_name": "bench", "workflow_name": "noop", "workflow_id": f"{tag}-{i}"}
            )
        return [f"{tag}-{i}" for i in range(n)]

    query = sa.text(
        "SELECT workflow_uuid, status, updated_at FROM dbos.workflow_status "
        "WHERE workflow_uuid LIKE :prefix AND status IN ('SUCCESS', 'ERROR', 'CANCELLED')"
    )

    def done(ids: list[str]) -> dict[str, float]:
        with engine.connect() as conn:
            rows = conn.execute(query, {"prefix": f"{tag}-%"}).all()
        for row in rows:
            if row.status != "SUCCESS":
                raise RuntimeError(f"dbos workflow {row.workflow_uuid} ended {row.status}")
        return {row.workflow_uuid: row.updated_at / 1000.0 for row in rows}

    return submit, done


def procrastinate_run(n: int, tag: str) -> Run:
    import psycopg
    from noop_procrastinate import app, noop

    def submit() -> list[str]:
        with app.open():
            return [str(noop.defer()) for _ in range(n)]

    query = (
        "SELECT j.id, j.status, max(e.at) FROM procrastinate_jobs j "
        "LEFT JOIN procrastinate_events e ON e.job_id = j.id AND e.type = 'succeeded' "
        "WHERE j.id >= %s AND j.id <= %s AND j.status IN ('succeeded', 'failed', 'aborted') "
        "GROUP BY j.id, j.status"
    )

    def done(ids: list[str]) -> dict[str, float]:
        numbers = [int(i) for i in ids]
        with psycopg.connect(DATABASE_URL) as conn:
            rows = conn.execute(query, (min(numbers), max(numbers))).fetchall()
        wanted = set(ids)
        found: dict[str, float] = {}
        for job_id, status, at in rows:
            if str(job_id) not in wanted:
                continue
            if status != "succeeded":
                raise RuntimeError(f"procrastinate job {job_id} ended {status}")
            found[str(job_id)] = at.timestamp()
        return found

    del tag
    return submit, done


RUNS = {
    "celery": celery_run,
    "rq": rq_run,
    "dbos": dbos_run,
    "procrastinate": procrastinate_run,
}


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("system", choices=sorted(RUNS))
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--tag", default="m")
    args = parser.parse_args(argv)
    submit, done = RUNS[args.system](args.jobs, args.tag)
    cpu_before = cpu_seconds()
    first_submit = time.time()
    ids = submit()
    last_submit = time.time()
    producer_cpu = cpu_seconds() - cpu_before
    completed = wait_for(done, ids)
    finished()
    print(
        json.dumps(
            {
                "first_submit": first_submit,
                "last_submit": last_submit,
                "last_completion": max(completed),
                "completed": len(completed),
                "producer_cpu_s": producer_cpu,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
