"""Which providers are paused: a worker looks before it claims a job for one.

A provider is paused by an operator, or automatically when it is shown to refuse our
credentials (services/probes.py: then it is probed again and resumed by itself). A
worker reads the set at most once a second. A job waiting for a paused provider says
so when it is read (``WaitReasons``), computed then, never written to the job.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ferryman.core.errors import ProviderError
from ferryman.core.job import JobStatus

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ferryman.core.job import Job
    from ferryman.ports.control import ControlStore, ProviderPause
    from ferryman.ports.store import JobSummary
    from ferryman.services.catalog import ModelCatalog

# How long a worker trusts its last look at which providers are paused.
PAUSES_CACHE_SECONDS = 1.0
# A job for a paused provider comes back this much later to look again.
PAUSED_PROVIDER_RECHECK_SECONDS = 30.0


class ProviderPauses:
    """Which providers are paused, read at most once a second per worker."""

    def __init__(self, control: ControlStore) -> None:
        self._control = control
        self._paused: frozenset[str] = frozenset()
        self._read_at = float("-inf")

    async def paused(self, provider: str) -> bool:
        await self.refresh()
        return provider in self._paused

    async def refresh(self) -> None:
        """Read the set again if the last look is too old to trust."""
        now = time.monotonic()
        if now - self._read_at > PAUSES_CACHE_SECONDS:
            self._paused = await self._control.paused_providers()
            self._read_at = now

    def known(self, provider: str) -> bool | None:
        """Whether it is paused, from a look still fresh enough to trust; None when the
        next ``paused`` would read again (this never reads: it may run off the loop)."""
        if time.monotonic() - self._read_at > PAUSES_CACHE_SECONDS:
            return None
        return provider in self._paused

    def mark_paused(self, provider: str) -> None:
        """This worker paused it: no need to wait for the next look to know."""
        self._paused = self._paused | {provider}

    def mark_resumed(self, provider: str) -> None:
        """This worker resumed it (its probe passed)."""
        self._paused = self._paused - {provider}


# Jobs that wait to be run (not running, not finished): a paused provider holds them.
_WAITING = frozenset({JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED})


class WaitReasons:
    """Why a waiting job is not being run: the pause of the provider behind its model
    (the one it moved to, after a fallback), read when asked, never written to jobs."""

    def __init__(self, *, catalog: ModelCatalog, control: ControlStore) -> None:
        self._catalog = catalog
        self._control = control

    async def of(self, job: Job | JobSummary) -> ProviderPause | None:
        """The pause holding ``job`` (queued or waiting for a retry), or None."""
        [pause] = await self.of_each([job])
        return pause

    async def of_each(self, jobs: Sequence[Job | JobSummary]) -> list[ProviderPause | None]:
        """``of`` for each job, in order, with one look at the pauses (none when no job
        waits)."""
        providers = [self._provider_of(job) for job in jobs]
        if not any(providers):
            return [None] * len(jobs)
        pauses = await self._control.provider_pauses()
        return [None if provider is None else pauses.get(provider) for provider in providers]

    def _provider_of(self, job: Job | JobSummary) -> str | None:
        """The provider a waiting job waits for; None for a job that does not wait."""
        if job.status not in _WAITING:
            return None
        try:
            return self._catalog.route_at(job.model, job.fallback_level).provider.name
        except ProviderError:
            return None  # a model this process does not know: nothing to say about it
