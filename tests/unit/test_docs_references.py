"""Docs, docstrings and comments refer only to documents inside the repository.

The design lives in docs/architecture.md and the public contract in docs/reference.md; a
reader of this repository has no other document to follow. A reference to a planning
document kept elsewhere (its file name, one of its section numbers, a relative path out
of the repository) would send the reader nowhere.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("src", "docs", "tests", "bench", "README.md", "CONTRIBUTING.md", "CHANGELOG.md")
SUFFIXES = frozenset({".py", ".md", ".sql", ".toml", ".txt", ".yaml"})
OUTSIDE = re.compile(
    r"\b(?:ARCHITECTURE|API|CONVENTIONS)\.md\b"  # planning documents kept elsewhere
    r"|\.\./shared\b"  # a path out of the repository
    r"|\bsection [0-9]+\b"  # a numbered section of such a document
    r"|\b(?:the|design) brief\b"
)
# Lines a branch in flight rewrites as it merges; each entry must still match, so the
# list is emptied as they land.
PENDING: dict[str, str] = {}
THIS_FILE = Path(__file__).resolve()


def _files() -> list[Path]:
    found: list[Path] = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
    return [p for p in found if p.resolve() != THIS_FILE]


def test_no_doc_or_docstring_refers_to_a_document_outside_the_repository() -> None:
    offending = []
    for path in _files():
        relative = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            if OUTSIDE.search(line) and not line.startswith(PENDING.get(relative, "\0")):
                offending.append(f"{relative}:{number}: {line.strip()}")
    assert not offending, "\n".join(offending)


def test_every_pending_line_is_still_there() -> None:
    for relative, start in PENDING.items():
        lines = (ROOT / relative).read_text().splitlines()
        assert any(line.startswith(start) for line in lines), (
            f"{relative} no longer starts a line with {start!r}: remove it from PENDING"
        )


def test_the_pattern_finds_what_it_is_for() -> None:
    for text in ("see ARCHITECTURE.md", "(API.md, CLI)", "../shared/x", "section 8", "the brief"):
        assert OUTSIDE.search(text), text
    for text in ("docs/architecture.md", "be brief", "docs/reference.md", "a brief pause"):
        assert not OUTSIDE.search(text), text
