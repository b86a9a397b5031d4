"""The named-block SQL loader, and that every shipped SQLite block compiles."""

from __future__ import annotations

import sqlite3

import pytest

from ferryman.adapters.sqlfile import Queries, parse_blocks
from ferryman.adapters.sqlite import sql
from ferryman.adapters.sqlite.migrations import migrate


def test_blocks_are_split_by_their_headers() -> None:
    text = "-- a file comment\n-- name: one\nSELECT 1;\n\n-- name: two\n-- why\nSELECT 2;\n"
    assert parse_blocks(text) == {"one": "SELECT 1;", "two": "-- why\nSELECT 2;"}


def test_a_name_defined_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match="twice"):
        parse_blocks("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")


def test_a_missing_block_names_its_file() -> None:
    queries = Queries({"a": "SELECT 1"}, source="pkg/x.sql")
    with pytest.raises(KeyError, match=r"pkg/x\.sql"):
        queries["b"]


class _AnyParams(dict):  # type: ignore[type-arg]
    def __missing__(self, key: str) -> None:
        return None


@pytest.mark.parametrize("queries", [sql.JOBS, sql.QUEUE, sql.MISC], ids=["jobs", "queue", "misc"])
def test_every_block_compiles_against_the_schema(queries: Queries) -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn)
    assert len(queries) > 0
    for name, text in queries.items():
        try:
            conn.execute("EXPLAIN " + text, _AnyParams())
        except sqlite3.Error as exc:
            pytest.fail(f"block {name}: {exc}")
