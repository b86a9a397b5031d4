"""The model catalog: which provider and model an alias means, for intake and workers.

Built once per process by wiring from ``[providers.*]`` and ``[models.*]``; intake
refuses an alias it does not know (422, nothing stored), and a worker resolves the
alias of the job it runs (and, when the job has moved to a fallback, that one).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferryman.core.errors import FerrymanError, ProviderBadRequestError
from ferryman.core.models import ModelAlias

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ferryman.ports.provider import ModelProvider


@dataclass(frozen=True, slots=True)
class Route:
    alias: ModelAlias
    provider: ModelProvider


class ModelCatalog:
    def __init__(
        self, *, aliases: Iterable[ModelAlias], providers: Iterable[ModelProvider]
    ) -> None:
        self._providers: Mapping[str, ModelProvider] = {p.name: p for p in providers}
        self._aliases: Mapping[str, ModelAlias] = {a.name: a for a in aliases}
        for alias in self._aliases.values():
            if alias.provider not in self._providers:
                raise ValueError(f"model {alias.name!r} names an unknown provider")
            for fallback in alias.fallbacks:
                if fallback not in self._aliases:
                    raise ValueError(f"model {alias.name!r} falls back on an unknown model")
        # Every alias's route, made once: a worker resolves one per attempt (twice).
        self._routes: Mapping[str, Route] = {
            a.name: Route(alias=a, provider=self._providers[a.provider])
            for a in self._aliases.values()
        }

    @classmethod
    def serving_own_names(cls, providers: Iterable[ModelProvider]) -> ModelCatalog:
        """Each provider reachable under an alias of its own name, for its model of that
        name (how the simulated model is set up, and what tests need)."""
        listed = list(providers)
        return cls(
            aliases=[ModelAlias(name=p.name, provider=p.name, model=p.name) for p in listed],
            providers=listed,
        )

    def knows(self, alias: str) -> bool:
        return alias in self._aliases

    def aliases(self) -> list[ModelAlias]:
        return [self._aliases[name] for name in sorted(self._aliases)]

    def providers(self) -> list[ModelProvider]:
        return [self._providers[name] for name in sorted(self._providers)]

    def provider(self, name: str) -> ModelProvider | None:
        """The provider of that name, if this process has it configured."""
        return self._providers.get(name)

    def chain(self, alias: str) -> list[str]:
        """The alias and the fallbacks a job on it may move to, in order."""
        found = self._aliases.get(alias)
        return [alias] if found is None else [alias, *found.fallbacks]

    def route_at(self, alias: str, fallback_level: int) -> Route:
        """The route of a job on ``alias`` that moved ``fallback_level`` fallbacks on (0:
        its own). A level past the chain's end stays on its last model."""
        if fallback_level <= 0:
            return self.route(alias)
        chain = self.chain(alias)
        return self.route(chain[min(max(0, fallback_level), len(chain) - 1)])

    async def aclose(self) -> None:
        """Close every provider (their connections and threads)."""
        await asyncio.gather(*(provider.aclose() for provider in self._providers.values()))

    def route(self, alias: str) -> Route:
        """The provider and model an alias means. Raises ProviderBadRequestError (a job
        stored under an alias this process no longer knows fails INVALID_REQUEST)."""
        found = self._routes.get(alias)
        if found is None:
            raise ProviderBadRequestError("no model of that name is configured here")
        return found


@dataclass(frozen=True, slots=True)
class ProviderReport:
    name: str
    kind: str
    ok: bool
    detail: str = ""


async def provider_reports(catalog: ModelCatalog) -> list[ProviderReport]:
    """Ask every provider at once to prove it answers and takes our key."""

    async def one(provider: ModelProvider) -> ProviderReport:
        kind = type(provider).__name__
        try:
            await provider.check()
        except FerrymanError as exc:
            return ProviderReport(name=provider.name, kind=kind, ok=False, detail=exc.message)
        return ProviderReport(name=provider.name, kind=kind, ok=True)

    return list(await asyncio.gather(*(one(p) for p in catalog.providers())))
