"""When a provider refuses a call's credentials: is it the provider, or that request?

A 401 or 403 from a model's API does not always mean our key is refused: a gateway in
front of a self-hosted model may answer 403 for what one request says. Pausing the
provider for every tenant on such an answer would let one tenant's content stop
everyone's work. So a worker whose call was refused (UNAUTHORIZED) asks the provider
itself, with ``check()`` (its models endpoint), and the answer decides (``KeyCheck``):

- the probe is refused too (401/403): the provider is unauthorised. It is paused for
  every worker, recorded as automatic with the reason, and the job waits for it
  without spending its budget (services/failures.py, core/retry.py);
- the probe passes: the refusal was about that request. The job fails, not retried,
  and nothing is paused;
- the probe fails some other way (a timeout, a 5xx): it shows nothing either way. The
  job is retried as after a transient failure, spending its budget; nothing is paused.

An account refusal (no quota or credit left, ``AccountRefusedError``) names the account,
not a request: it pauses the provider at once, without a probe. A models endpoint
answers an account without credit all the same, so no probe can show it mended: that
pause waits for an operator.

A burst of refusals costs one probe per provider and process: calls refused at once
share the probe under way, and its verdict is reused for ``reuse_seconds``.

While a provider is paused automatically, every worker process looks every few
seconds (``run``); the one whose conditional write takes a due probe
(``ControlStore.take_provider_probe``) probes the provider again, on a backoff
(``ProbeSchedule``: 30 s, doubling to 10 minutes by default), and resumes it when a probe
passes. An operator's pause is never probed nor lifted here.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from ferryman.core.errors import (
    AccountRefusedError,
    FailureClass,
    FerrymanError,
    ProviderUnauthorizedError,
)
from ferryman.observability import metrics
from ferryman.observability.logging import describe_exception
from ferryman.ports.control import ProviderPause

if TYPE_CHECKING:
    from ferryman.core.clock import Clock
    from ferryman.core.errors import ProviderError
    from ferryman.ports.control import ControlStore
    from ferryman.ports.provider import ModelProvider
    from ferryman.services.catalog import ModelCatalog
    from ferryman.services.pauses import ProviderPauses

log = structlog.get_logger("ferryman.worker")

# How long a probe's verdict answers for every refused call of its provider in this
# process: a burst of refusals costs one probe.
PROBE_REUSE_SECONDS = 10.0
# How often a worker process looks for automatic pauses whose probe is due.
PROBE_LOOK_SECONDS = 5.0


class KeyCheck(enum.StrEnum):
    """What a probe of a provider (its ``check()``) showed about our credentials."""

    ACCEPTED = "accepted"  # it takes them: a refused call was refused for what it asked
    REFUSED = "refused"  # it refuses them (401/403): the provider is unauthorised
    UNKNOWN = "unknown"  # the probe failed some other way: nothing is shown


@dataclass(frozen=True, slots=True)
class ProbeSchedule:
    """When an automatically paused provider is probed again: ``initial_seconds`` after
    the pause, then each wait twice the last, up to ``maximum_seconds``."""

    initial_seconds: float = 30.0
    maximum_seconds: float = 600.0

    def __post_init__(self) -> None:
        if self.initial_seconds <= 0:
            raise ValueError("initial_seconds must be positive")
        if self.maximum_seconds < self.initial_seconds:
            raise ValueError("maximum_seconds must be at least initial_seconds")

    def after(self, previous_seconds: float | None) -> float:
        """The wait after a probe whose own wait was ``previous_seconds``."""
        if previous_seconds is None:
            return self.initial_seconds
        return min(self.maximum_seconds, max(self.initial_seconds, previous_seconds * 2))


class ProviderProbes:
    """Judges refused calls by probing their provider; pauses, re-probes and resumes."""

    def __init__(
        self,
        *,
        catalog: ModelCatalog,
        control: ControlStore,
        clock: Clock,
        pauses: ProviderPauses,
        actor: str,
        schedule: ProbeSchedule | None = None,
        reuse_seconds: float = PROBE_REUSE_SECONDS,
    ) -> None:
        self._catalog = catalog
        self._control = control
        self._clock = clock
        self._pauses = pauses
        self._actor = actor
        self._schedule = schedule or ProbeSchedule()
        self._reuse_seconds = reuse_seconds
        # Per provider: the last verdict and when it was reached; the probe under way.
        self._verdicts: dict[str, tuple[float, KeyCheck]] = {}
        self._probing: dict[str, asyncio.Future[KeyCheck]] = {}

    async def after_refusal(self, provider: str | None, error: ProviderError) -> KeyCheck | None:
        """What a failed call shows about its provider's view of our credentials, and
        the provider paused when it refuses them. None for a failure that is no
        refusal of credentials, a scripted one, or a call that reached no provider."""
        if error.failure_class is not FailureClass.UNAUTHORIZED or error.scripted:
            return None
        found = None if provider is None else self._catalog.provider(provider)
        if found is None:
            return None
        if isinstance(error, AccountRefusedError):
            await self._pause(
                found.name,
                reason=f"the provider refused our account ({error.code}): resume it once "
                "the account has quota or credit again",
                probed=False,
            )
            return KeyCheck.REFUSED
        check = await self._shared_probe(found)
        if check is KeyCheck.REFUSED:
            await self._pause(
                found.name,
                reason=f"a call was refused ({error.code}) and so was a probe of the "
                "provider: it is probed again until it takes our credentials",
                probed=True,
            )
        elif check is KeyCheck.ACCEPTED:
            log.warning("provider.request_refused", provider=found.name, error_code=error.code)
        return check

    async def probe_due(self) -> list[tuple[str, KeyCheck]]:
        """One look: probe each automatic pause whose probe is due and that this process
        takes (one conditional write, so one process per probe), resuming the provider
        when the probe passes. Which providers were probed, and how it went."""
        now = self._clock.now()
        probed: list[tuple[str, KeyCheck]] = []
        for name, pause in sorted((await self._control.provider_pauses()).items()):
            if not pause.resumes_by_itself or (pause.next_probe_at or 0.0) > now:
                continue
            provider = self._catalog.provider(name)
            if provider is None:
                continue  # not configured here: processes that have it probe it
            wait = self._schedule.after(pause.probe_interval_seconds)
            taken = await self._control.take_provider_probe(
                name, now=now, next_probe_at=now + wait, probe_interval_seconds=wait
            )
            if taken is None:
                continue  # another process has it, or it was resumed meanwhile
            check = await self._probe(provider, why="paused")
            self._verdicts[name] = (self._clock.now(), check)
            if check is KeyCheck.ACCEPTED:
                await self._resume(taken)
            probed.append((name, check))
        return probed

    async def run(self, stop: asyncio.Event, *, look_seconds: float = PROBE_LOOK_SECONDS) -> None:
        """``probe_due`` every ``look_seconds`` until ``stop``."""
        while not stop.is_set():
            try:
                await self.probe_due()
            except Exception as exc:  # noqa: BLE001 - looked at again next round; never stop
                log.warning("provider.probe_round_failed", **describe_exception(exc))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(look_seconds):
                    await stop.wait()

    async def _shared_probe(self, provider: ModelProvider) -> KeyCheck:
        """A recent verdict, the probe under way, or a new probe: never one per call."""
        name = provider.name
        recent = self._verdicts.get(name)
        if recent is not None and self._clock.now() - recent[0] < self._reuse_seconds:
            return recent[1]
        probing = self._probing.get(name)
        if probing is None:
            probing = asyncio.ensure_future(self._probe(provider, why="refused_call"))
            self._probing[name] = probing
            probing.add_done_callback(functools.partial(self._probed, name))
        # Shielded: a call interrupted while it waits must not cancel the others' probe.
        return await asyncio.shield(probing)

    def _probed(self, name: str, probing: asyncio.Future[KeyCheck]) -> None:
        self._probing.pop(name, None)
        if not probing.cancelled() and probing.exception() is None:
            self._verdicts[name] = (self._clock.now(), probing.result())

    async def _probe(self, provider: ModelProvider, *, why: str) -> KeyCheck:
        detail: str | None = None
        try:
            await provider.check()
        except ProviderUnauthorizedError as exc:
            check, detail = KeyCheck.REFUSED, exc.code
        except Exception as exc:  # noqa: BLE001 - a probe that fails shows nothing either way
            check = KeyCheck.UNKNOWN
            detail = exc.code if isinstance(exc, FerrymanError) else type(exc).__name__
        else:
            check = KeyCheck.ACCEPTED
        metrics.child(metrics.PROVIDER_PROBES, provider=provider.name, result=str(check)).inc()
        level = logging.WARNING if check is KeyCheck.REFUSED else logging.INFO
        log.log(
            level,
            "provider.probed",
            provider=provider.name,
            why=why,
            result=str(check),
            error_code=detail,
        )
        return check

    async def _pause(self, provider: str, *, reason: str, probed: bool) -> None:
        now = self._clock.now()
        first = self._schedule.initial_seconds if probed else None
        pause = ProviderPause(
            provider=provider,
            since=now,
            actor=self._actor,
            reason=reason,
            automatic=True,
            next_probe_at=None if first is None else now + first,
            probe_interval_seconds=first,
        )
        self._pauses.mark_paused(provider)
        if await self._control.pause_provider_automatically(pause):
            metrics.child(metrics.PROVIDER_AUTO_PAUSES, provider=provider).inc()
            log.error(
                "provider.paused",
                provider=provider,
                automatic=True,
                reason=reason,
                next_probe_in_seconds=first,
            )

    async def _resume(self, pause: ProviderPause) -> None:
        now = self._clock.now()
        resumed = await self._control.resume_provider_automatically(
            pause.provider,
            since=pause.since,
            actor=self._actor,
            now=now,
            reason="a probe of the provider passed: it takes our credentials again",
        )
        if resumed:
            self._pauses.mark_resumed(pause.provider)
            metrics.child(metrics.PROVIDER_AUTO_RESUMES, provider=pause.provider).inc()
            log.warning(
                "provider.resumed",
                provider=pause.provider,
                automatic=True,
                paused_for_seconds=round(now - pause.since, 3),
            )
