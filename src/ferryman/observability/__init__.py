"""Logging, metrics and tracing: what operators see. Never prompts or outputs."""

from __future__ import annotations
