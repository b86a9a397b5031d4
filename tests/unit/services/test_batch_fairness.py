"""A tenant's big batch lets other tenants' submissions through (issue 18, item 9).

On SQLite every write of a process queues for one writer thread. A batch is written
in slices, each its own write, so a submission that arrives while a slice is being
written is taken before the batch's next slice, not after the whole batch. The test
holds the first slice inside the writer (a threading.Event) until the other tenant's
submission is queued behind it, then records the order in which jobs were written.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

from ferryman.adapters.sqlite import jobops
from ferryman.services.intake import BATCH_SLICE_JOBS, BatchItem, SubmitRequest

if TYPE_CHECKING:
    import pytest

GATE_SECONDS = 30.0


async def test_another_tenants_submit_is_written_between_two_slices_of_a_batch(
    sqlite_world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = sqlite_world
    written: list[str] = []
    slice_running = threading.Event()
    submit_queued = threading.Event()
    real_create, real_create_many = jobops.create, jobops.create_many

    def recording_create(conn: Any, change: Any, **kwargs: Any) -> Any:
        written.append(change.after.tenant_id)
        return real_create(conn, change, **kwargs)

    def held_create_many(conn: Any, changes: Any, **kwargs: Any) -> Any:
        if not slice_running.is_set():
            slice_running.set()
            assert submit_queued.wait(GATE_SECONDS)
        return real_create_many(conn, changes, **kwargs)

    monkeypatch.setattr(jobops, "create", recording_create)
    monkeypatch.setattr(jobops, "create_many", held_create_many)
    items = [BatchItem(SubmitRequest("generate", {"prompt": str(i)})) for i in range(250)]

    batch = asyncio.create_task(world.intake.submit_many(tenant_id="flood", items=items))
    assert await asyncio.to_thread(slice_running.wait, GATE_SECONDS)
    single = asyncio.create_task(
        world.intake.submit(tenant_id="quiet", request=SubmitRequest("generate", {"prompt": "q"}))
    )
    inbox = world.store._store._db._writer._thread._inbox
    for _ in range(int(GATE_SECONDS / 0.01)):
        if inbox.qsize() >= 1:  # the submit waits behind the held slice
            break
        await asyncio.sleep(0.01)
    submit_queued.set()
    await asyncio.gather(batch, single)

    assert written.index("quiet") == BATCH_SLICE_JOBS
    assert written.count("flood") == 250
