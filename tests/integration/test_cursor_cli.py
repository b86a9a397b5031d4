"""Page cursors through the CLI: ``ferryman dlq list --cursor`` reads the store's list
directly, so a cursor no list gave is refused by the engine (core/cursors.py) and
reported as a usage error naming the option, never a traceback or an empty page."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable
    from pathlib import Path

    Cli = Callable[..., subprocess.CompletedProcess[str]]

pytestmark = pytest.mark.timeout(120)


def test_dlq_list_refuses_a_cursor_no_list_gave(ferryman_cli: Cli, tmp_path: Path) -> None:
    """(Every malformed shape is tried on every engine in tests/contract/test_cursors.py.)"""
    assert ferryman_cli(tmp_path, "migrate").returncode == 0

    bad = ferryman_cli(tmp_path, "dlq", "list", "--cursor", "1700000000.5~dl_0a")
    good = ferryman_cli(tmp_path, "dlq", "list", "--json", "--cursor", "gen_" + "0" * 26)

    assert bad.returncode == 2, bad.stderr
    assert "--cursor: The cursor is not a next_cursor a list of jobs gave." in bad.stderr
    assert "Traceback" not in bad.stderr
    assert good.returncode == 0, good.stderr
