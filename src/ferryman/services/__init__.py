"""Use cases over the ports: intake, the worker, the sweeper, queries and operations."""

from __future__ import annotations
