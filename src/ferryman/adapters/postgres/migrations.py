"""Versioned schema migrations for PostgreSQL: numbered .sql files, applied once each.

``schema/NNNN_name.sql`` files run in number order; ``schema_migrations`` records
which ran and when. Every pending migration runs in one transaction holding a
transaction-level advisory lock, so several processes starting at once (API and
workers on many machines) take turns: the first applies what is pending, the
others then find nothing left to do. PostgreSQL's DDL is transactional, so a crash
mid-upgrade leaves the old schema intact. A database whose schema is newer than
this code knows is refused rather than used half-understood.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from ferryman.adapters.postgres.sql import ADMIN, SQL_PACKAGE
from ferryman.core.errors import StoreUnavailableError

if TYPE_CHECKING:
    import psycopg

_FILE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")
# Any fixed number, the same in every process: the lock migrations take turns on.
MIGRATION_LOCK_ID = 0x66_65_72_72_79  # "ferry"


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
        if match is not None:
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
        raise RuntimeError(f"PostgreSQL migrations must be numbered 1..n without gaps: {versions}")
    return found


def latest_version() -> int:
    return len(available())


async def applied_version(conn: psycopg.AsyncConnection[Any]) -> int:
    """The schema version of a database: 0 for one ferryman never migrated."""
    cursor = await conn.execute(ADMIN["ledger_exists"])
    row = await cursor.fetchone()
    if row is None or not row[0]:
        return 0
    cursor = await conn.execute(ADMIN["schema_version"])
    row = await cursor.fetchone()
    return 0 if row is None else int(row[0])


async def migrate(conn: psycopg.AsyncConnection[Any]) -> list[int]:
    """Apply every pending migration in one locked transaction; the versions applied."""
    migrations = available()
    async with conn.transaction():
        await conn.execute(ADMIN["lock_migrations"], {"lock_id": MIGRATION_LOCK_ID})
        current = await applied_version(conn)
        if current > len(migrations):
            raise SchemaTooNewError(
                f"the database schema is at version {current}, newer than this ferryman "
                f"knows ({len(migrations)}); upgrade ferryman to use it"
            )
        applied: list[int] = []
        if current == len(migrations):
            return applied  # up to date: nothing written (a read-only server opens too)
        await conn.execute(ADMIN["create_ledger"])
        for migration in migrations[current:]:
            # A whole file in one call: the simple query protocol runs every statement.
            await conn.execute(migration.sql.encode("utf-8"), prepare=False)
            await conn.execute(
                ADMIN["record_migration"],
                {"version": migration.version, "name": migration.name, "applied_at": time.time()},
            )
            applied.append(migration.version)
    return applied
