"""ferryman: durable jobs for slow, costly foundation-model calls."""

from __future__ import annotations
