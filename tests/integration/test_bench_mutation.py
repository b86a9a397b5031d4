"""bench/mutation.py keeps working on a fresh clone: mutmut copies into ``mutants/`` all
the checkout the tests read, and the CI sample is drawn the same way every time.

These live outside tests/unit and tests/contract, the selection mutmut runs, so they never
run inside mutmut's own copy."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from bench_modules import load

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

ROOT = Path(__file__).resolve().parents[2]
# What mutmut copies by itself, or mutates from source_paths, or no test reads.
NOT_COPIED_ON_PURPOSE = {"src", "tests", "pyproject.toml", ".gitignore"}


def tracked_top_level(require_service: Callable[[str, str], NoReturn]) -> set[str]:
    if not (ROOT / ".git").exists():
        # Locally (an unpacked archive) this skips, saying why; under CI=true it fails.
        require_service("a git checkout", "no list of tracked files to compare with")
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return {path.split("/", 1)[0] for path in listed}


def test_mutmut_copies_every_tracked_path_the_tests_may_read(
    require_service: Callable[[str, str], NoReturn],
) -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    copied = set(config["also_copy"])
    missing = tracked_top_level(require_service) - NOT_COPIED_ON_PURPOSE - copied
    assert not missing, f"add to [tool.mutmut] also_copy: {sorted(missing)}"
    assert all((ROOT / path).exists() for path in copied), "also_copy names a path that is gone"


def test_the_sample_draws_from_every_mutant_of_the_scope_the_same_way_each_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)  # mutmut reads [tool.mutmut] from the working directory
    mutation = load("bench_mutation", "mutation.py")
    names = mutation.mutant_names(("ferryman.core.retry.*",))
    assert names == sorted(names) and len(names) == len(set(names))
    assert len(names) > 30 and all(n.startswith("ferryman.core.retry.x") for n in names)
    assert all("__mutmut_" in n for n in names)
    assert mutation.mutant_names(("ferryman.core.retry.*",)) == names
    assert mutation.mutant_names(("ferryman.core.no_such_module.*",)) == []


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--sample", "0"], "--sample must be at least 1"),
        (["--sample", "5", "--min-score", "1.5"], "--min-score is a fraction from 0 to 1"),
        (["--sample", "5", "--report"], "not allowed with argument"),
    ],
)
def test_bad_sample_arguments_are_refused_before_anything_runs(args: list[str], error: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "mutation.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert error in done.stderr
    assert "running mutmut" not in done.stderr
