"""The SQL of the PostgreSQL adapter, loaded once from the package's .sql files."""

from __future__ import annotations

from ferryman.adapters.sqlfile import Queries

SQL_PACKAGE = "ferryman.adapters.postgres"

JOBS = Queries.load(SQL_PACKAGE, "jobs.sql")
QUEUE = Queries.load(SQL_PACKAGE, "queue.sql")
MISC = Queries.load(SQL_PACKAGE, "misc.sql")
LIMITS = Queries.load(SQL_PACKAGE, "limits.sql")
ADMIN = Queries.load(SQL_PACKAGE, "admin.sql")
