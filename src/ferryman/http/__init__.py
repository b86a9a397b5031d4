"""The HTTP API (docs/reference.md): a FastAPI app built from services by ``create_app``."""

from __future__ import annotations

from ferryman.http.app import AppDeps, create_app

__all__ = ["AppDeps", "create_app"]
