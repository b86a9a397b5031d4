"""The engine registry's URLs, and the rule that keeps it whole: tests and benchmarks
open engines through ``open_engine`` (and result stores through
``open_result_store``), never by building adapter classes themselves, so what they
run is what wiring runs. tests/contract/test_engine_registry.py opens every entry."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ferryman.engines import (
    ENGINES,
    InvalidUrlError,
    check_engine_url,
    engine_entry,
    engine_name,
)

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = ROOT / "src" / "ferryman" / "adapters"
# The adapters' own unit tests build what they test.
OWN_TESTS = ROOT / "tests" / "unit" / "adapters"
# Files outside it that build adapters by hand, and why they must.
ALLOWED = {
    "tests/contract/test_capabilities.py": "the memory adapter's own limit knob "
    "(max_atomic_batch), which no engine opened from a URL has",
    "tests/unit/services/test_intake_capabilities.py": "intake over subclasses of the "
    "memory store that count its transactions or state an estimated usage",
    "tests/contract/test_postgres_engine.py": "the PostgreSQL adapter's own tests (pools, "
    "migrations, LISTEN), kept beside the contract suite because they need its server",
    "tests/contract/test_postgres_group_commit.py": "the PostgreSQL adapter's group commit, "
    "driven below its ports",
    "tests/contract/test_shared_limits.py": "several pools (or client sets) over one store, "
    "each the shared limits of one process, to show they share",
    "tests/integration/test_sqlite_peer_wakeups.py": "the SQLite adapter's wake-ups between "
    "processes, driven below its ports",
}


def _engine_classes() -> set[str]:
    """Every class an engine package exports (its ``__all__``), read without importing
    it, so an optional driver need not be installed."""
    names: set[str] = set()
    for init in ADAPTERS.glob("*/__init__.py"):
        for node in ast.walk(ast.parse(init.read_text())):
            if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
            ):
                names |= set(ast.literal_eval(node.value))
    return names


def _built_by_hand(path: Path, classes: set[str], root: Path = ROOT) -> list[str]:
    """Where ``path`` calls an engine class (or its ``open``) imported from ferryman.adapters."""
    tree = ast.parse(path.read_text())
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ferryman.adapters")
        for alias in node.names
        if alias.name in classes
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        called = node.func
        if isinstance(called, ast.Attribute):
            called = called.value
        if isinstance(called, ast.Name) and called.id in imported:
            found.append(f"{path.relative_to(root)}:{node.lineno} {called.id}")
    return found


def test_the_scan_knows_the_engine_classes_and_finds_a_hand_built_one(tmp_path: Path) -> None:
    classes = _engine_classes()
    assert {"SqliteDatabase", "InMemoryJobQueue", "PostgresJobStore", "FileResultStore"} <= classes
    example = tmp_path / "hand_built.py"
    example.write_text(
        "from ferryman.adapters.sqlite import SqliteDatabase as Db\n"
        "from ferryman.engines import open_engine\n"
        "Db.open('x')\n"
        "open_engine('sqlite:///x', clock=None)\n"
    )
    assert _built_by_hand(example, classes, tmp_path) == ["hand_built.py:3 Db"]


def test_no_test_or_benchmark_builds_an_engine_by_hand() -> None:
    classes = _engine_classes()
    files = [
        path
        for folder in ("tests", "bench")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if not path.is_relative_to(OWN_TESTS) and str(path.relative_to(ROOT)) not in ALLOWED
    ]
    found = [where for path in files for where in _built_by_hand(path, classes)]
    assert not found, (
        "open engines with ferryman.engines.open_engine (knobs in EngineOptions) and "
        f"result stores with ferryman.result_stores.open_result_store: {found}"
    )


def test_the_allowed_files_still_need_it() -> None:
    classes = _engine_classes()
    stale = [name for name in ALLOWED if not _built_by_hand(ROOT / name, classes)]
    assert not stale, f"no longer builds adapters by hand; take it off ALLOWED: {stale}"


@pytest.mark.parametrize("url", ["mysql://db/x", "sqlite3:///f.db", "", "aws:/x"])
def test_an_unknown_scheme_names_every_engine_there_is(url: str) -> None:
    with pytest.raises(InvalidUrlError) as raised:
        engine_entry(url)
    message = str(raised.value)
    assert message.startswith("FERRYMAN_DATABASE_URL must be ")
    for entry in ENGINES:
        assert entry.example in message


def test_a_password_in_an_unknown_url_is_never_shown() -> None:
    with pytest.raises(InvalidUrlError) as raised:
        engine_entry("mysql://me:hunter2@db/x")
    assert "hunter2" not in str(raised.value)


def test_an_aws_url_is_checked_before_anything_opens() -> None:
    """Region and credentials come from the AWS chain, never the URL: a parameter the
    engine does not know is named, not ignored."""
    assert engine_entry("aws://jobs").name == "aws"
    with pytest.raises(InvalidUrlError, match="unknown parameter 'region'"):
        check_engine_url("aws://dynamodb?region=eu-west-1")
    with pytest.raises(InvalidUrlError, match="cannot name the queues"):
        check_engine_url("aws://" + "n" * 72)
    with pytest.raises(InvalidUrlError, match="queue name or a queue URL"):
        check_engine_url("aws://jobs?queue=https://example.com/q")
    check_engine_url("aws://jobs?queue=https://sqs.eu-west-1.amazonaws.com/123456789012/q")


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("sqlite:///./ferryman.db", "sqlite"),
        ("postgresql://u@h/d", "postgresql"),
        ("postgres://u@h/d", "postgresql"),
        ("memory://", "memory"),
    ],
)
def test_each_scheme_names_its_engine(url: str, name: str) -> None:
    assert engine_name(url) == name
    check_engine_url(url)


@pytest.mark.parametrize("url", ["sqlite://relative.db", "sqlite:///", "memory://other"])
def test_each_engine_checks_the_rest_of_its_url(url: str) -> None:
    engine_name(url)  # the scheme is known ...
    with pytest.raises(InvalidUrlError):
        check_engine_url(url)  # ... the rest is not right


def test_only_a_shared_engine_keeps_results_in_the_database_by_default() -> None:
    # Processes on several machines: a local results directory would be one machine's.
    assert {entry.name for entry in ENGINES if entry.shared} == {"postgresql", "aws"}
