"""The API's routes, one module per area: jobs, operations, health."""

from __future__ import annotations
