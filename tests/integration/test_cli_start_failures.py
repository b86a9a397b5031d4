"""A process that cannot start says why in one line and leaves nothing behind.

A results path that cannot be a directory (a file, a path under a file, a place no
directory can be made) is one line naming FERRYMAN_RESULTS_URL and the path, never a
traceback; and whatever configuration stops ``serve`` (that, a missing provider key, a
task that cannot be built) stops it before it makes a database.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

COMMAND_TIMEOUT_SECONDS = 60
# Linux's /proc takes no new directory, whoever asks (root included, as in CI).
PROC = Path("/proc")


def ferryman(cwd: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
    env.update(extra)
    env.pop("OPENAI_API_KEY", None)
    return subprocess.run(
        [sys.executable, "-m", "ferryman.cli.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )


def _a_file(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "elsewhere" / "results"
    path.parent.mkdir()
    path.write_text("not a directory")
    return path, "not a directory"


def _under_a_file(tmp_path: Path) -> tuple[Path, str]:
    blocker = tmp_path / "elsewhere" / "blocker"
    blocker.parent.mkdir()
    blocker.write_text("a file where a directory must be")
    return blocker / "results", f"not a directory ({blocker} is a file)"


def _where_nothing_can_be_made(tmp_path: Path) -> tuple[Path, str]:
    if not PROC.is_dir():
        pytest.skip("needs Linux's /proc, where no directory can be made")
    return PROC / f"ferryman-results-{os.getpid()}", "this process cannot create it in /proc"


@pytest.mark.parametrize("where", [_a_file, _under_a_file, _where_nothing_can_be_made])
@pytest.mark.parametrize("command", [("serve", "--port", "0"), ("worker",), ("migrate",)])
def test_a_results_path_that_cannot_work_is_one_line_and_makes_no_database(
    tmp_path: Path, where: Callable[[Path], tuple[Path, str]], command: tuple[str, ...]
) -> None:
    results, reason = where(tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()

    done = ferryman(cwd, *command, FERRYMAN_RESULTS_URL=f"file://{results}")

    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: FERRYMAN_RESULTS_URL names {results}: {reason}")
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize(
    ("toml", "why"),
    [
        (
            '[providers.openai]\nkind = "openai"\n',
            "OPENAI_API_KEY, which is not set",
        ),
        (
            '[tasks.t]\nprompt = "{{ input.x }}"\n'
            'input_schema = {type = "object"}\noutput_schema = {type = "object"}\n',
            "names no field of the input schema",
        ),
    ],
)
def test_serve_stopped_by_its_configuration_makes_no_database(
    tmp_path: Path, toml: str, why: str
) -> None:
    (tmp_path / "ferryman.toml").write_text(toml)

    done = ferryman(tmp_path, "serve", "--port", "0")

    assert done.returncode == 2
    assert why in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ferryman.toml"]
