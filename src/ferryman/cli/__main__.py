"""``python -m ferryman.cli``."""

from __future__ import annotations

from ferryman.cli.main import app

app(prog_name="ferryman")
