"""Services hear of a backend that is away through one branch of core's errors
(BackendUnavailableError and its kinds), never through OSError or a driver's errors:
translating those is each engine's business, at its boundary."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVICES = Path(__file__).resolve().parents[3] / "src" / "ferryman" / "services"
NOT_FOR_SERVICES = {"OSError", "IOError", "EnvironmentError"}
DRIVERS = {"sqlite3", "psycopg", "psycopg_pool", "botocore", "boto3", "aiobotocore"}


def _caught(handler: ast.ExceptHandler) -> list[str]:
    """The dotted names an ``except`` clause catches."""
    if handler.type is None:
        return []
    parts = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return [ast.unparse(part) for part in parts]


def _wrong_catches(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ExceptHandler):
            for name in _caught(node):
                if name in NOT_FOR_SERVICES or name.split(".")[0] in DRIVERS:
                    found.append(f"line {node.lineno}: except {name}")
    return found


@pytest.mark.parametrize("path", sorted(SERVICES.glob("*.py")), ids=lambda p: p.name)
def test_no_service_catches_an_os_or_driver_error(path: Path) -> None:
    assert _wrong_catches(path.read_text()) == []


def test_the_check_finds_what_it_looks_for() -> None:
    source = (
        "try:\n    pass\nexcept (StoreUnavailableError, OSError):\n    pass\n"
        "try:\n    pass\nexcept sqlite3.OperationalError:\n    pass\n"
        "try:\n    pass\nexcept BackendUnavailableError:\n    pass\n"
    )
    assert _wrong_catches(source) == [
        "line 3: except OSError",
        "line 7: except sqlite3.OperationalError",
    ]
