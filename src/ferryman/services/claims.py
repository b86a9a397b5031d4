"""Claims asked for in the same turn of the event loop are written together.

A worker starts every delivery of a receive batch as its own task, and those tasks
reach their claim within the same turn of the loop. Instead of one conditional write
each (one group-commit op each, on SQLite), the claims asked before the loop comes
round go to the ledger as one ``claim_many``: each is still conditional on its own
job's revision and decided by core's claim rule, and each caller gets the result its
own ``claim`` would have had. A claim asked alone is an ordinary ``claim``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferryman.services.ledger import ClaimRequest, ClaimResult, JobLedger


class ClaimBatcher:
    def __init__(self, ledger: JobLedger) -> None:
        self._ledger = ledger
        self._pending: list[tuple[ClaimRequest, asyncio.Future[ClaimResult]]] = []
        # The writes in progress (a task is only weakly held by the loop).
        self._writing: set[asyncio.Task[None]] = set()

    async def claim(self, request: ClaimRequest) -> ClaimResult:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ClaimResult] = loop.create_future()
        self._pending.append((request, future))
        if len(self._pending) == 1:
            # After every callback already due: the other deliveries of the batch.
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        task = asyncio.create_task(self._write(pending))
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)

    async def _write(self, pending: list[tuple[ClaimRequest, asyncio.Future[ClaimResult]]]) -> None:
        # A delivery cancelled while its claim waited (a worker stopping) must not have
        # its job claimed for nobody to run: it would wait for its lease to end.
        pending = [(request, future) for request, future in pending if not future.cancelled()]
        if not pending:
            return
        try:
            if len(pending) == 1:
                request = pending[0][0]
                results: list[ClaimResult | Exception] = [
                    await self._ledger.claim(
                        request.known.job_id,
                        attempt_id=request.attempt_id,
                        worker_id=request.worker_id,
                        now=request.now,
                        lease_until=request.lease_until,
                        max_deliveries_without_outcome=request.max_deliveries_without_outcome,
                        known=request.known,
                    )
                ]
            else:
                results = await self._ledger.claim_many([request for request, _ in pending])
        except BaseException as exc:  # nothing was written: every caller gets it
            for _, future in pending:
                if not future.done():
                    future.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for (_, future), result in zip(pending, results, strict=True):
            if future.done():
                continue
            if isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result(result)
