"""Versioned schema migrations for the SQLite file: numbered .sql files, applied once each.

``schema/NNNN_name.sql`` files run in number order; ``schema_migrations`` records
which ran and when. Every pending migration runs inside one ``BEGIN IMMEDIATE``
transaction (SQLite's DDL is transactional), so two processes opening the same file
at once cannot both apply one, and a crash mid-upgrade leaves the old schema intact.

A file made before migrations existed has the tables of 0001 and no
``schema_migrations``: it is recorded as being at 0001 and upgraded from there, so
an existing ``ferryman.db`` is never stranded. A file whose schema is newer than this
code knows is refused rather than used half-understood.
"""

from __future__ import annotations

import re
import sqlite3
import time
from dataclasses import dataclass
from importlib import resources

from ferryman.adapters.sqlite.sql import SQL_PACKAGE
from ferryman.adapters.sqlite.writer import begin_immediate
from ferryman.core.errors import StoreUnavailableError

_FILE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


class SchemaTooNewError(StoreUnavailableError):
    """The database was upgraded by a newer ferryman than this one."""

    code = "schema_too_new"


def available() -> list[Migration]:
    """Every migration shipped with this version, in order."""
    found: list[Migration] = []
    for entry in resources.files(SQL_PACKAGE).joinpath("schema").iterdir():
        match = _FILE.match(entry.name)
        if match is None:
            continue
        found.append(
            Migration(
                version=int(match["version"]),
                name=match["name"],
                sql=entry.read_text(encoding="utf-8"),
            )
        )
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"SQLite migrations must be numbered 1..n without gaps: {versions}")
    return found


def latest_version() -> int:
    return len(available())


def applied_version(conn: sqlite3.Connection) -> int:
    """The schema version of an open file: 0 for an empty file."""
    if _has_table(conn, "schema_migrations"):
        row = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
        return int(row[0] or 0)
    return 1 if _has_table(conn, "jobs") else 0


def migrate(conn: sqlite3.Connection, *, patience_seconds: float) -> list[int]:
    """Apply every pending migration in one transaction; return the versions applied.

    ``conn`` has no busy handler (a busy timeout of 0): the write lock is waited for
    as the writer thread waits for it (``writer.begin_immediate``), so a process that
    starts beside busy ones is not the one that keeps losing the lock to them."""
    migrations = available()
    begin_immediate(conn, patience_seconds=patience_seconds)
    try:
        current = applied_version(conn)
        if current > len(migrations):
            raise SchemaTooNewError(
                f"the database schema is at version {current}, newer than this ferryman "
                f"knows ({len(migrations)}); upgrade ferryman to use it"
            )
        _ensure_ledger(conn, current)
        applied: list[int] = []
        for migration in migrations[current:]:
            for statement in _statements(migration.sql):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.name, time.time()),
            )
            applied.append(migration.version)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return applied


def _ensure_ledger(conn: sqlite3.Connection, current: int) -> None:
    if _has_table(conn, "schema_migrations"):
        return
    conn.execute(
        "CREATE TABLE schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
    )
    if current == 1:
        # A file from before migrations: it holds exactly the first schema.
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (1, 'initial', ?)",
            (time.time(),),
        )


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return row is not None


def _statements(script: str) -> list[str]:
    statements: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--") and not current.strip():
            continue
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    if current.strip():
        raise RuntimeError("a migration ends with an incomplete statement")
    return statements
