"""``python -m ferryman``: the ``ferryman`` command."""

from __future__ import annotations

from ferryman.cli.main import app

app(prog_name="ferryman")
