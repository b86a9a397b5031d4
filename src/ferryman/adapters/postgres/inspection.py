"""Looking at a PostgreSQL database without changing it, and making one that is missing.

``inspect`` connects once and reads what ``ferryman doctor`` reports: the schema
version and whether this user could write (a standby in recovery, or a role
without the privileges, could not). ``create_database`` is what ``ferryman
migrate`` does for a database that does not exist yet, when the role may.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from ferryman.adapters.postgres.errors import translate_errors
from ferryman.adapters.postgres.migrations import applied_version
from ferryman.adapters.postgres.sql import ADMIN
from ferryman.core.errors import StoreUnavailableError

CONNECT_TIMEOUT_SECONDS = 5
# Where CREATE DATABASE is issued from: every server has it.
MAINTENANCE_DATABASE = "postgres"


@dataclass(frozen=True, slots=True)
class Inspection:
    schema_version: int
    writable: bool
    unwritable_reason: str | None = None


async def inspect(url: str) -> Inspection:
    """Raises psycopg.OperationalError when the server or database cannot be reached."""
    async with await psycopg.AsyncConnection.connect(
        url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS
    ) as conn:
        version = await applied_version(conn)
        reason = await _why_unwritable(conn, migrated=version > 0)
    return Inspection(schema_version=version, writable=reason is None, unwritable_reason=reason)


async def _why_unwritable(conn: psycopg.AsyncConnection[Any], *, migrated: bool) -> str | None:
    cursor = await conn.execute(ADMIN["why_unwritable"], {"migrated": migrated})
    row = await cursor.fetchone()
    assert row is not None
    in_recovery, read_only, user, may_create, may_write = row
    if in_recovery:
        return "the server is a standby in recovery (read-only): point the URL at the primary"
    if read_only:
        return "transactions are read-only here (default_transaction_read_only is on)"
    if migrated and not may_write:
        return f"role {user} may not insert, update and delete in the jobs table"
    if not migrated and not may_create:
        return f"role {user} may not create tables in the schema (needed by the first migrate)"
    return None


def is_missing_database(exc: psycopg.OperationalError) -> bool:
    """True when the connection failed because the database does not exist."""
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate == "3D000":  # invalid_catalog_name
        return True
    text = str(exc)
    return "database" in text and "does not exist" in text


async def create_database(url: str) -> bool:
    """CREATE DATABASE for the one the URL names, from the maintenance database.
    False when another process made it first. Raises StoreUnavailableError when the
    server cannot be reached or the role may not create databases."""
    dbname = conninfo_to_dict(url).get("dbname")
    if not dbname:
        return False
    with translate_errors():
        try:
            async with await psycopg.AsyncConnection.connect(
                url,
                dbname=MAINTENANCE_DATABASE,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
            ) as conn:
                await conn.execute(
                    sql.SQL(ADMIN["create_database"]).format(database=sql.Identifier(str(dbname)))
                )
        except pg_errors.DuplicateDatabase:
            return False
        except pg_errors.InsufficientPrivilege as exc:
            raise _cannot_create(str(dbname), exc) from exc
    return True


def _cannot_create(dbname: str, exc: Exception) -> StoreUnavailableError:
    return StoreUnavailableError(
        f"postgresql: the database {dbname} does not exist and this role may not create it "
        f"({type(exc).__name__}); create it (createdb {dbname}) or grant CREATEDB"
    )
