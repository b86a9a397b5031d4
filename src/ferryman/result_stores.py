"""Result stores: where FERRYMAN_RESULTS_URL puts results, opened and closed in one place.

``db`` keeps results in the engine's own database (``Engine.results``: the engine
opens and closes it); ``file://dir`` keeps them in segment files under a directory
(``FileResultStore``, opened and closed here); ``s3://BUCKET/PREFIX`` keeps them as
S3 objects (``S3ResultStore``, over AWS clients of its own, opened and closed here:
the engine need not be AWS's, so S3 results beside PostgreSQL work too).
``open_result_store(url, engine)`` is the one lifecycle wiring, tests and
benchmarks use, whichever store it is. No Settings here: wiring reads them.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ferryman.config import may_be_secret
from ferryman.engines import InvalidUrlError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ferryman.adapters.aws.bucket import BucketLocation
    from ferryman.engines import Engine
    from ferryman.ports.results import ResultStore

FILE_SCHEME = "file://"
S3_SCHEME = "s3://"
INLINE_RESULTS = "db"


@dataclass(frozen=True, slots=True)
class OpenResultStore:
    """A result store, open, and where it keeps results (for people)."""

    store: ResultStore
    location: str


def results_bucket(results_url: str) -> BucketLocation | None:
    """The bucket and prefix of ``s3://BUCKET/PREFIX`` (None for any other URL);
    InvalidUrlError, naming what is wrong, for an s3:// URL S3 cannot take."""
    if not results_url.startswith(S3_SCHEME):
        return None
    from ferryman.adapters.aws.bucket import parse_s3_url
    from ferryman.adapters.aws.location import AwsUrlError

    try:
        return parse_s3_url(results_url)
    except AwsUrlError as exc:
        raise InvalidUrlError(f"FERRYMAN_RESULTS_URL: {exc}") from None


def results_directory(results_url: str) -> str | None:
    """The directory of ``file://dir``; None for results kept elsewhere (the database,
    or S3). Raises InvalidUrlError for a URL no result store takes."""
    if results_url == INLINE_RESULTS or results_bucket(results_url) is not None:
        return None
    if not results_url.startswith(FILE_SCHEME):
        shown = (
            "a value not shown (it may hold a credential)"
            if may_be_secret(results_url)
            else repr(results_url)
        )
        raise InvalidUrlError(
            f"FERRYMAN_RESULTS_URL must be file://directory, s3://BUCKET/PREFIX or db, got {shown}"
        )
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
    bucket = results_bucket(results_url)
    if bucket is not None:
        async with _open_s3_store(bucket) as opened:
            yield opened
        return
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


@asynccontextmanager
async def _open_s3_store(bucket: BucketLocation) -> AsyncIterator[OpenResultStore]:
    """The S3 store over clients of its own (closed on exit): the engine may be any.
    Nothing is called here; a missing bucket is found by the store's probe."""
    from ferryman.adapters.aws.clients import open_clients
    from ferryman.adapters.aws.results_s3 import S3ResultStore

    async with open_clients() as clients:
        yield OpenResultStore(S3ResultStore(clients, bucket.bucket, bucket.prefix), bucket.shown())
