"""Failpoints as an observer of the worker's named steps (services/observers.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.services.observers import JobObserver

if TYPE_CHECKING:
    from ferryman.failpoints import Failpoints


class FailpointObserver(JobObserver):
    """Crashes the process at a named step, as FERRYMAN_FAILPOINTS asks (failpoints.py)."""

    def __init__(self, failpoints: Failpoints) -> None:
        self._failpoints = failpoints

    def reached(self, point: str) -> None:
        self._failpoints.hit(point)
