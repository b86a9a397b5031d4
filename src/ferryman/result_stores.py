"""Result stores: where FERRYMAN_RESULTS_URL puts results, opened and closed in one place.

``db`` keeps results in the engine's own database (``Engine.results``: the engine
opens and closes it); ``file://dir`` keeps them in segment files under a directory
(``FileResultStore``, opened and closed here); ``s3://`` is reserved for a later
version. ``open_result_store(url, engine)`` is the one lifecycle wiring, tests and
benchmarks use, whichever store it is. No Settings here: wiring reads them.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ferryman.config import may_be_secret
from ferryman.engines import InvalidUrlError, UnsupportedBackendError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ferryman.engines import Engine
    from ferryman.ports.results import ResultStore

FILE_SCHEME = "file://"
INLINE_RESULTS = "db"
# Result stores whose URLs are reserved but which this version does not ship.
_PLANNED_RESULTS = ("s3://",)


@dataclass(frozen=True, slots=True)
class OpenResultStore:
    """A result store, open, and where it keeps results (for people)."""

    store: ResultStore
    location: str


def results_directory(results_url: str) -> str | None:
    """The directory of ``file://dir``, or None for results kept in the database."""
    for scheme in _PLANNED_RESULTS:
        if results_url.startswith(scheme):
            raise UnsupportedBackendError(
                f"FERRYMAN_RESULTS_URL={scheme}... is not available in this version; "
                "use file://directory or db"
            )
    if results_url == INLINE_RESULTS:
        return None
    if not results_url.startswith(FILE_SCHEME):
        shown = (
            "a value not shown (it may hold a credential)"
            if may_be_secret(results_url)
            else repr(results_url)
        )
        raise InvalidUrlError(f"FERRYMAN_RESULTS_URL must be file://directory or db, got {shown}")
    directory = results_url.removeprefix(FILE_SCHEME)
    if not directory:
        raise InvalidUrlError("FERRYMAN_RESULTS_URL names no directory: use file://./results")
    return directory


@asynccontextmanager
async def open_result_store(
    results_url: str, engine: Engine, *, min_free_bytes: int | None = None
) -> AsyncIterator[OpenResultStore]:
    """The store ``results_url`` names over the open ``engine``; closed on exit.
    ``min_free_bytes`` (files only; None: the store's own) is where a results
    directory stops taking new work."""
    directory = results_directory(results_url)
    if directory is None:
        # The engine's own: it closes with the engine.
        yield OpenResultStore(engine.results, f"in the {engine.name} database")
        return
    from ferryman.adapters.files import FileResultStore

    # The store creates its directory on the first put (fsyncing each new level).
    files = (
        FileResultStore(directory)
        if min_free_bytes is None
        else FileResultStore(directory, min_free_bytes=min_free_bytes)
    )
    try:
        yield OpenResultStore(files, str(await asyncio.to_thread(Path(directory).resolve)))
    finally:
        # Finishes the puts already submitted and joins the writer thread: blocking.
        await asyncio.to_thread(files.close)
