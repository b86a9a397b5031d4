"""ResultStore: where validated model outputs are kept, under attempt-specific keys.

Keys follow ``ferryman.core.results.result_key``. A ref is the store's own name for
what it wrote; the job row keeps it, so a ref carries what is needed to check the
bytes it leads to (the key they were written under and, for refs written today, a
checksum). Nothing is ever served unverified.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection


class ResultStore(Protocol):
    async def put(self, key: str, data: bytes) -> str:
        """Store durably (on return it survives a crash and was read back as written)
        and return the ref to publish. Raises ResultsUnavailableError (or the job
        store's StoreUnavailableError for results kept in the database) when the
        write cannot be made; ValueError for a key no store may use."""
        ...

    async def get(self, ref: str, *, key: str) -> bytes:
        """The bytes stored under ref, verified to be the record of ``key`` (and to
        match the ref's checksum when it carries one). Raises ResultUnreadableError
        when they are missing, damaged or another key's; ResultsUnavailableError when
        the store cannot be read right now."""
        ...

    async def probe(self) -> None:
        """Cheaply check that a put would succeed now; raise ResultsUnavailableError
        (with the reason) when it would not. Leaves nothing behind and never creates
        the store's location."""
        ...

    async def reclaim(self, *, any_job_exists: Callable[[Collection[str]], Awaitable[bool]]) -> int:
        """Delete stored results none of whose jobs exist any more (the caller
        purged them); return the bytes reclaimed. ``any_job_exists(job_ids)`` is True
        when at least one of them still has a job. A result whose owner cannot be
        told from its key is kept."""
        ...


@dataclass(frozen=True, slots=True)
class StagedResult:
    """A result not written yet, as the transaction that publishes it may write it.

    ``ref`` is what ``put`` would have returned for these bytes; ``home`` names the
    database the result store keeps its results in, so that only a job store of that
    same database takes it (ports/store.py's PublishesWithResult)."""

    key: str
    data: bytes
    ref: str
    home: object = field(repr=False, compare=False)


@runtime_checkable
class StagesResults(Protocol):
    """Optional, beside ResultStore: a store whose results live in the job store's own
    database. Instead of a ``put`` of its own (one commit, one more group-commit wait
    per job), the result can be written by the publish itself, in its transaction: it
    is then durable no later than the job that references it, and a publish that
    is not written (the attempt lost the job) writes no result either."""

    def staged(self, key: str, data: bytes) -> StagedResult:
        """The result as the publish would write it; nothing is written here. ValueError
        for a key no store may use, as ``put``."""
        ...
