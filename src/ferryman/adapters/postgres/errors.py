"""Driver errors at the adapter boundary: an outage becomes StoreUnavailableError.

Only what says the database cannot serve us now is translated: a lost or refused
connection, a pool with no connection to give, a server shutting down, a full
disk, a serialization failure or deadlock, a read-only server (a standby after a
failover). A programming error (bad SQL, a constraint the code should have
prevented) propagates as itself: retrying it would never help, and calling it an
outage would hide a bug.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import psycopg
from psycopg import errors as pg_errors

from ferryman.core.errors import StoreUnavailableError

if TYPE_CHECKING:
    from collections.abc import Iterator

# OperationalError covers connection loss, PoolTimeout, PoolClosed, AdminShutdown,
# CannotConnectNow, DiskFull, serialization failures and deadlocks.
UNAVAILABLE: tuple[type[Exception], ...] = (
    psycopg.OperationalError,
    pg_errors.ReadOnlySqlTransaction,
)


def unavailable(exc: BaseException) -> StoreUnavailableError:
    # psycopg's messages name hosts, tables and constraints, never bound values
    # (those appear only in the DETAIL of constraint errors, which are not translated).
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    error = StoreUnavailableError(f"postgresql: {type(exc).__name__}: {first_line}")
    error.__cause__ = exc
    return error


@contextlib.contextmanager
def translate_errors() -> Iterator[None]:
    """Raise StoreUnavailableError from an outage; let every other error through."""
    try:
        yield
    except UNAVAILABLE as exc:
        raise unavailable(exc) from exc
