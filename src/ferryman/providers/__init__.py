"""ModelProvider adapters: one foundation-model API each, behind ports.provider."""

from __future__ import annotations

from ferryman.providers.simulated import SimulatedProvider

__all__ = ["SimulatedProvider"]
