"""core/ stays plain Python: no code made from strings at run time, and no write into a
frozen object past its frozen ``__setattr__``.

Core holds the rules every engine persists; a reader must be able to trust what the
source says. A job changes only by ``dataclasses.replace`` (core/changes.py makes one
copy per change), never by generated code or by setting a slot of a frozen job.
The check only reads the source text.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[3] / "src" / "ferryman" / "core"
# Builtins that run or build code from a string.
CODE_FROM_TEXT = {"exec", "eval", "compile"}
# What writes past a frozen dataclass's __setattr__ (object.__setattr__, a slot's own
# descriptor) or makes an instance without its __init__ (object.__new__).
PAST_THE_FROZEN_GUARD = {"__setattr__", "__delattr__", "__set__", "__delete__", "__new__"}


def _departures(source: str) -> list[str]:
    """Each departure as ``line N: what``, in the order of the source."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in CODE_FROM_TEXT
        ):
            found.append((node.lineno, f"{node.func.id}()"))
        elif isinstance(node, ast.Attribute) and node.attr in PAST_THE_FROZEN_GUARD:
            found.append((node.lineno, ast.unparse(node)))
    return [f"line {line}: {what}" for line, what in sorted(found)]


def test_core_has_modules_to_check() -> None:
    assert {"job.py", "changes.py"} <= {path.name for path in CORE.glob("*.py")}


@pytest.mark.parametrize("path", sorted(CORE.glob("*.py")), ids=lambda p: p.name)
def test_core_makes_no_code_from_text_and_writes_no_frozen_object(path: Path) -> None:
    assert _departures(path.read_text()) == []


def test_the_check_finds_what_it_looks_for() -> None:
    source = "\n".join(
        [
            "exec('x = 1', namespace)",
            "object.__setattr__(job, 'revision', 2)",
            "Job.revision.__set__(job, 2)",
            "new = object.__new__(Job)",
            "value = eval('1 + 1')",
            "after = dataclasses.replace(job, revision=2)",
            "job.executor.evaluate(setattr_count)",
        ]
    )
    assert _departures(source) == [
        "line 1: exec()",
        "line 2: object.__setattr__",
        "line 3: Job.revision.__set__",
        "line 4: object.__new__",
        "line 5: eval()",
    ]
