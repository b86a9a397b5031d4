"""A provider report as a worker process sends it (ports/limits.py), for the shared
limits' suites: every field a test does not name is a quiet report's."""

from __future__ import annotations

from typing import Any

from ferryman.ports.limits import ProviderReport


def provider_report(member: str, now: float, **fields: Any) -> ProviderReport:
    base: dict[str, Any] = {
        "provider": "p#1",
        "model": "m",
        "member": member,
        "now": now,
        "grown_window": 0.0,
        "grown_rate": 0.0,
        "throttled_epoch": None,
        "narrowed_window": False,
        "lowered_rate": False,
        "learned_rate": None,
        "start_window": 4.0,
        "max_window": 6.0,
        "live_after_seconds": 5.0,
    }
    return ProviderReport(**{**base, **fields})
