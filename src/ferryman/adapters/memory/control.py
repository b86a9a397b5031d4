"""InMemoryControlStore: the operator's pause switches, with who flipped them last."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferryman.ports.control import Switch


@dataclass(frozen=True, slots=True)
class SwitchChange:
    switch: Switch
    paused: bool
    actor: str
    at: float


class InMemoryControlStore:
    def __init__(self) -> None:
        self._paused: set[Switch] = set()
        # Kept so tests can check who paused what; the SQL engines keep the last change.
        self.changes: list[SwitchChange] = []

    async def paused(self) -> frozenset[Switch]:
        return frozenset(self._paused)

    async def set_paused(self, switch: Switch, paused: bool, *, actor: str, now: float) -> None:
        if paused:
            self._paused.add(switch)
        else:
            self._paused.discard(switch)
        self.changes.append(SwitchChange(switch=switch, paused=paused, actor=actor, at=now))
