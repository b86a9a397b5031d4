"""The named-block SQL loader, and that every shipped SQLite block compiles."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ferryman.adapters.sqlfile import Queries, parse_blocks, read_sql
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
    migrate(conn, patience_seconds=10)
    assert len(queries) > 0
    for name, text in queries.items():
        try:
            conn.execute("EXPLAIN " + text, _AnyParams())
        except sqlite3.Error as exc:
            pytest.fail(f"block {name}: {exc}")


def test_each_block_runs_to_the_next_header() -> None:
    text = "-- name: a\nSELECT 1;\n-- name: b\nSELECT 2;\n-- name: c\nSELECT 3;\n"
    assert parse_blocks(text) == {"a": "SELECT 1;", "b": "SELECT 2;", "c": "SELECT 3;"}


def test_a_shipped_file_loads_as_its_named_blocks() -> None:
    text = read_sql(sql.SQL_PACKAGE, "misc.sql")
    assert text == (Path(sql.__file__).parent / "misc.sql").read_text(encoding="utf-8")
    loaded = Queries.load(sql.SQL_PACKAGE, "misc.sql")
    assert dict(loaded) == parse_blocks(text)
    assert len(loaded) > 0
    with pytest.raises(KeyError, match=r"ferryman\.adapters\.sqlite/misc\.sql"):
        loaded["no_such_block"]


def test_blocks_given_without_a_file_say_so_when_one_is_missing() -> None:
    with pytest.raises(KeyError, match="<sql>"):
        Queries({})["missing"]
