"""Every engine in the registry opens through open_engine, serves every storage port
Engine names, closes them together, and takes its results URL through
open_result_store. A new entry in ferryman.engines.ENGINES is held here without a
line changed: the cases are the registry's own."""

from __future__ import annotations

import importlib
import pkgutil
import typing
from typing import TYPE_CHECKING, Any

import pytest

from ferryman.core.clock import FakeClock
from ferryman.core.errors import FerrymanError
from ferryman.engines import ENGINES, Engine, EngineEntry, EngineOptions, open_engine
from ferryman.result_stores import open_result_store

if TYPE_CHECKING:
    from pathlib import Path


# Where a case opens each engine; an engine added to the registry needs a line here
# (and the test that finds one missing says so).
async def _url(entry: EngineEntry, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if entry.name == "sqlite":
        return f"sqlite:///{tmp_path / 'registry.db'}"
    if entry.name == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    if entry.name == "aws":
        # The closed engine's call below is retried as an outage: without the backoff.
        request.getfixturevalue("aws_retries_at_once")
        return str(await request.getfixturevalue("aws_url_factory")())
    return entry.example


def _ports() -> dict[str, type]:
    """Engine's fields that are storage ports (Protocol classes): the names and types."""
    import ferryman.ports

    # engines.py names its ports only for the type checker: look them up in ports/.
    names: dict[str, Any] = {}
    for found in pkgutil.iter_modules(ferryman.ports.__path__, "ferryman.ports."):
        names.update(vars(importlib.import_module(found.name)))
    ports = {}
    for name, hint in typing.get_type_hints(Engine, localns=names).items():
        candidates = typing.get_args(hint) or (hint,)
        for candidate in candidates:
            if isinstance(candidate, type) and getattr(candidate, "_is_protocol", False):
                ports[name] = candidate
    return ports


def _members(port: type) -> set[str]:
    return {name for name in vars(port) if not name.startswith("_")}


def test_the_scan_finds_every_storage_port() -> None:
    assert {"store", "queue", "keys", "control", "results", "webhook_secrets", "limits"} <= set(
        _ports()
    )


@pytest.mark.parametrize(
    "entry",
    [pytest.param(e, marks=pytest.mark.aws) if e.name == "aws" else e for e in ENGINES],
    ids=lambda entry: entry.name,
)
async def test_every_engine_opens_serves_every_port_and_closes(
    entry: EngineEntry, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = await _url(entry, request, tmp_path)
    async with open_engine(url, clock=FakeClock(), options=EngineOptions()) as engine:
        assert engine.name == entry.name
        assert engine.location
        for field, port in _ports().items():
            adapter = getattr(engine, field)
            if adapter is None:
                # Only the optional ports may be absent (limits each process keeps).
                assert field == "limits", f"{entry.name} serves no {field}"
                continue
            missing = {m for m in _members(port) if not hasattr(adapter, m)}
            assert not missing, f"{entry.name}.{field} lacks {sorted(missing)}"
        assert await engine.keys.list_keys() == []
        assert await engine.webhook_secrets.get_secret("t1") is None
        async with open_result_store("db", engine) as results:
            assert results.store is engine.results
            assert entry.name in results.location
    if engine.database is not None:
        # Closed with the engine: its ports answer as a store that is away.
        with pytest.raises(FerrymanError):
            await engine.keys.list_keys()
        with pytest.raises(FerrymanError):
            await engine.webhook_secrets.get_secret("t1")


async def test_a_results_directory_is_opened_over_any_engine_and_closed_after(
    tmp_path: Path,
) -> None:
    from ferryman.core.errors import ResultsUnavailableError

    directory = tmp_path / "results"
    async with (
        open_engine("memory://", clock=FakeClock()) as engine,
        open_result_store(f"file://{directory}", engine, min_free_bytes=0) as results,
    ):
        assert results.store is not engine.results
        assert results.location == str(directory.resolve())
        ref = await results.store.put("t1/gen_1/att_1", b'{"text": "hi"}')
        assert await results.store.get(ref, key="t1/gen_1/att_1") == b'{"text": "hi"}'
    with pytest.raises(ResultsUnavailableError):
        await results.store.put("t1/gen_2/att_1", b"{}")


def test_every_registered_engine_has_a_case_here() -> None:
    known = {"sqlite", "postgresql", "aws", "memory"}
    assert {entry.name for entry in ENGINES} == known, (
        "a new engine: give _url a way to open it, then add its name here"
    )


def test_options_keep_the_adapters_own_defaults() -> None:
    """EngineOptions' test-and-tool knobs default to what the adapters do unasked, so
    production (which never sets them) is unchanged by their being there."""
    import inspect

    from ferryman.adapters.sqlite import SqliteDatabase, SqliteJobQueue

    defaults = EngineOptions()

    def default(obj: Any, parameter: str) -> Any:
        return inspect.signature(obj).parameters[parameter].default

    assert defaults.sqlite_poll_interval_seconds == default(SqliteJobQueue, "poll_interval_seconds")
    assert defaults.sqlite_max_batch == default(SqliteDatabase.open, "max_batch")
    assert defaults.memory_outbox is False
    postgres = pytest.importorskip("ferryman.adapters.postgres")
    assert defaults.postgres_poll_interval_seconds == default(
        postgres.PostgresJobQueue, "poll_interval_seconds"
    )
    assert defaults.postgres_listen == default(postgres.PostgresDatabase.open, "listen")
