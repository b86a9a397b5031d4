"""A wait in one process is answered by another process's change (SQLite: the STATUSES
byte over the socket directory beside the file), not by the watcher's fallback read.

The API side runs here; the change is made by a separate Python process that opens the
same file, as a worker does. The watcher's fallback read is an hour away, so an answer
at all is the nudge's doing: the test waits on that condition, never on elapsed time.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ferryman.core.clock import SystemClock
from ferryman.core.job import JobStatus
from ferryman.engines import EngineOptions, open_engine
from ferryman.services.intake import Intake, SubmitRequest
from ferryman.services.jobs import JobQueries
from ferryman.services.ledger import JobLedger
from ferryman.services.watch import JobWatcher
from ferryman.tasks import builtin_tasks

if TYPE_CHECKING:
    from collections.abc import Iterator

NO_FALLBACK = 3600.0

# The other process: cancel the job through a ledger over its own engine, as a worker
# or another API process would change it.
OTHER_PROCESS = """
import asyncio, sys, time
from ferryman.core.clock import SystemClock
from ferryman.engines import EngineOptions, open_engine
from ferryman.services.ledger import JobLedger

async def main(url, job_id):
    async with open_engine(url, clock=SystemClock(), options=EngineOptions()) as engine:
        ledger = JobLedger(engine.store)
        await ledger.request_cancel(job_id, tenant_id="t1", now=time.time())
        # Let the coalesced byte leave at the end of this loop turn.
        await asyncio.sleep(0)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # pytest's tmp_path can be longer than a unix socket path may be.
    path = Path(tempfile.mkdtemp(prefix="fm-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_a_wait_is_answered_after_another_processs_change(short_dir: Path) -> None:
    url = f"sqlite:///{short_dir / 'f.db'}"
    clock = SystemClock()
    async with open_engine(url, clock=clock, options=EngineOptions()) as engine:
        ledger = JobLedger(engine.store)
        tasks = builtin_tasks()
        intake = Intake(
            store=engine.store,
            ledger=ledger,
            queue=engine.queue,
            tasks=tasks,
            control=engine.control,
            clock=clock,
            idempotency_retention_seconds=60.0,
            sim_scripts=False,
        )
        watcher = JobWatcher(store=engine.store, fallback_seconds=NO_FALLBACK, min_gap_seconds=0)
        jobs = JobQueries(
            store=engine.store, ledger=ledger, results=engine.results, watcher=watcher
        )
        submitted = await intake.submit(
            tenant_id="t1",
            request=SubmitRequest(task="generate", input={"prompt": "hi"}),
            idempotency_key=None,
        )
        job_id = submitted.job.job_id
        waiting = asyncio.create_task(jobs.wait("t1", job_id, wait_seconds=60))
        # Held, and its first read made: from here only a nudge brings another read.
        while watcher.reads < 1 or watcher.waiting < 1:  # noqa: ASYNC110 - set by the task
            await asyncio.sleep(0.001)

        other = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            OTHER_PROCESS,
            url,
            job_id,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        assert await other.wait() == 0

        view = await waiting
        assert view.job.status is JobStatus.CANCELLED
        assert watcher.reads >= 2
