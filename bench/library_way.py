"""Run a ferryman process with some of its speed exceptions put back to the library's
own way: benchmark only (``bench/speed_exceptions.py``), so production code carries no
switch for them.

    python bench/library_way.py WAYS -m ferryman serve --port 8000
    python bench/library_way.py WAYS path/to/producer.py ARGS...

WAYS is ``ours`` (nothing replaced) or a comma-separated list of:

hot_path     ``POST /v1/generations`` goes through FastAPI's router like every other
             route: the ``SubmitHotPath`` middleware is left out of the app
client_http  the clients send over httpx's own default transport (httpcore's pool)
             instead of ``client/http11.py`` / ``client/http11_sync.py`` / the eight
             httpx pools of ``client/pool.py``
sharded_pool ``AsyncClient`` sends plain http through ``client/pool.py``'s eight httpx pools,
             as it does https: how the https client is measured without a TLS server
             (the pools' bookkeeping does not depend on the scheme)

The removed exceptions' ways (``head_holding``, ``lock_wait``) are in this file at
commit 31dc8b8, with the code they measured.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable


def _router_for_submit() -> None:
    import ferryman.http.app as app_module

    def no_hot_path(app: Any) -> Any:
        return app

    app_module.SubmitHotPath = no_hot_path  # type: ignore[assignment,misc]


def _httpx_transport() -> None:
    import ferryman.client.async_client as async_client
    import ferryman.client.sync_client as sync_client

    def httpx_default() -> None:
        return None  # httpx.Client(transport=None) builds its own default transport

    async_client.Http11Transport = httpx_default  # type: ignore[assignment,misc]
    async_client.ShardedTransport = httpx_default  # type: ignore[assignment,misc]
    sync_client.Http11SyncTransport = httpx_default  # type: ignore[assignment,misc]


def _sharded_on_http() -> None:
    import ferryman.client.async_client as async_client
    from ferryman.client.pool import ShardedTransport

    async_client.Http11Transport = ShardedTransport  # type: ignore[assignment,misc]


def _sqlite_busy_handler() -> None:
    import ferryman.adapters.sqlite.migrations as migrations
    import ferryman.adapters.sqlite.writer as writer

    def begin_with_busy_handler(conn: sqlite3.Connection, *, patience_seconds: float) -> None:
        # The writer's connection was opened with a busy timeout of 0 (ours waits
        # itself); SQLite's handler waits the same patience instead. Set on every
        # BEGIN: one pragma, no I/O.
        conn.execute(f"PRAGMA busy_timeout = {int(patience_seconds * 1000)}")
        conn.execute("BEGIN IMMEDIATE")

    writer.begin_immediate = begin_with_busy_handler
    migrations.begin_immediate = begin_with_busy_handler


WAYS: dict[str, Callable[[], None]] = {
    "hot_path": _router_for_submit,
    "client_http": _httpx_transport,
    "sharded_pool": _sharded_on_http,
    "lock_wait": _sqlite_busy_handler,
}


def parse_ways(text: str) -> list[str]:
    if text == "ours":
        return []
    ways = text.split(",")
    unknown = [w for w in ways if w not in WAYS]
    if unknown:
        raise SystemExit(f"unknown ways {unknown}; known: ours, {', '.join(WAYS)}")
    return ways


def main(argv: list[str]) -> None:
    ways, target, *rest = argv
    for way in parse_ways(ways):
        WAYS[way]()
    if target == "-m":
        module, *args = rest
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    sys.argv = [target, *rest]
    sys.path.insert(0, str(Path(target).resolve().parent))
    runpy.run_path(target, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
