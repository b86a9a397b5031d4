"""ControlStore: operator switches (pause/resume) shared by every process."""

from __future__ import annotations

import enum
from typing import Protocol


class Switch(enum.StrEnum):
    INTAKE = "intake"
    WORKERS = "workers"


class ControlStore(Protocol):
    async def paused(self) -> frozenset[Switch]: ...

    async def set_paused(self, switch: Switch, paused: bool, *, actor: str, now: float) -> None: ...
