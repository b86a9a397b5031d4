"""PostgresResultStore: results kept in the database (FERRYMAN_RESULTS_URL=db).

A ref is ``db:<key>;sha256=<hex>``, as on SQLite: the row's key and the checksum
of its bytes, so a row changed in place is caught on read. Keys are attempt-specific
(core.results.result_key), so two attempts never overwrite each other's output.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ferryman.adapters.postgres.database import execute
from ferryman.adapters.postgres.grouping import Statement
from ferryman.adapters.postgres.sql import MISC
from ferryman.core.errors import (
    ResultsUnavailableError,
    ResultUnreadableError,
    StoreUnavailableError,
)
from ferryman.core.results import checksum, gone_jobs, job_id_of
from ferryman.ports.results import StagedResult

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection

    from ferryman.adapters.postgres.database import PostgresDatabase

_REF = re.compile(r"^db:(.+?)(?:;sha256=([0-9a-f]{64}))?$", re.DOTALL)
# Never a key the result rule makes (those start with a tenant id and a slash).
_PROBE_KEY = ".probe"
_RECLAIM_PAGE = 500


def _ref(key: str, data: bytes) -> str:
    return f"db:{key};sha256={checksum(data)}"


def _rows(rowcount: int, _row: object) -> int:
    return rowcount


class _ProbeDone(Exception):
    """Rolls the probe's transaction back: it must leave nothing behind."""


class PostgresResultStore:
    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    async def put(self, key: str, data: bytes) -> str:
        if not key:
            raise ValueError("a result key cannot be empty")
        # Durable on return: the statement's transaction committed (synchronous_commit
        # is the server's to set; on by default).
        params = {"key": key, "data": data}
        await self._db.group.run(Statement(MISC["put_result"], params, _rows))
        return _ref(key, data)

    def staged(self, key: str, data: bytes) -> StagedResult:
        """For the publish's own statement (PostgresJobStore.apply_with_result), which
        writes the row as ``put`` would, only if the job it publishes was written."""
        if not key:
            raise ValueError("a result key cannot be empty")
        return StagedResult(key=key, data=data, ref=_ref(key, data), home=self._db)

    async def get(self, ref: str, *, key: str) -> bytes:
        match = _REF.match(ref)
        if match is None:
            raise ResultUnreadableError("the stored result's reference is not a database reference")
        stored_key, digest = match.groups()
        # Never say whose result the ref names: that could be another tenant's.
        if stored_key != key:
            raise ResultUnreadableError("the stored result's reference names another result")
        row = await self._db.fetch_one(MISC["get_result"], {"key": key})
        if row is None:
            raise ResultUnreadableError("the stored result is missing")
        data = bytes(row["data"])
        if digest is not None and checksum(data) != digest:
            raise ResultUnreadableError("the stored result's bytes do not match their checksum")
        return data

    async def probe(self) -> None:
        try:
            async with self._db.transaction() as conn:
                # A real write, rolled back: finds a read-only or full server.
                await execute(conn, MISC["put_result"], {"key": _PROBE_KEY, "data": b"probe"})
                raise _ProbeDone
        except _ProbeDone:
            return
        except StoreUnavailableError as exc:
            raise ResultsUnavailableError(f"results: {exc.message}") from exc

    async def reclaim(self, *, any_job_exists: Callable[[Collection[str]], Awaitable[bool]]) -> int:
        reclaimed = 0
        after = ""
        while True:
            rows = await self._db.fetch_all(
                MISC["result_sizes_after"], {"after": after, "limit": _RECLAIM_PAGE}
            )
            if not rows:
                return reclaimed
            page = [(str(row["key"]), int(row["size"])) for row in rows]
            after = page[-1][0]
            owners = {key: job_id_of(key) for key, _ in page}
            gone = await gone_jobs({o for o in owners.values() if o}, any_job_exists)
            doomed = [(key, size) for key, size in page if owners[key] in gone]
            if doomed:
                await self._db.execute(MISC["delete_results"], {"keys": [k for k, _ in doomed]})
                reclaimed += sum(size for _, size in doomed)
