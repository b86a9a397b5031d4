"""The wired service refuses a model no provider serves, before storing anything (I7)."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from ferryman.config import ConfigurationError, Settings
from ferryman.core.errors import InvalidRequestError
from ferryman.services.intake import SubmitRequest
from ferryman.services.limiter import DEFAULT_START_CONCURRENCY, CallBudget
from ferryman.wiring import call_budgets, open_runtime


async def test_unknown_model_is_refused_at_intake(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'f.db'}", results_url=f"file://{tmp_path / 'r'}"
    )
    async with open_runtime(settings) as runtime:
        with pytest.raises(InvalidRequestError) as raised:
            await runtime.intake.submit(
                tenant_id="t1",
                request=SubmitRequest("generate", {"prompt": "hi"}, model="gpt-nonexistent"),
            )
        assert raised.value.errors[0]["loc"] == ["body", "model"]
        assert (await runtime.store.store.list_jobs(tenant_id=None)).jobs == []


async def test_by_default_a_script_for_the_sim_is_refused_and_the_log_says_how(
    tmp_path: Path,
) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'f.db'}", results_url=f"file://{tmp_path / 'r'}"
    )
    scripted = {"prompt": "hi", "simulate": {"latency_ms": 600_000}}
    async with open_runtime(settings) as runtime:
        with capture_logs() as logs:
            for _ in range(3):
                with pytest.raises(InvalidRequestError) as raised:
                    await runtime.intake.submit(
                        tenant_id="t1", request=SubmitRequest("generate", scripted)
                    )
        assert (await runtime.store.store.list_jobs(tenant_id=None)).jobs == []
    assert raised.value.errors[0]["loc"] == ["body", "input", "simulate"]
    assert "turned off on this server" in raised.value.message
    # Once per process, however many scripts a tenant sends.
    assert [entry for entry in logs if entry["event"] == "intake.sim_script_refused"] == [
        {
            "event": "intake.sim_script_refused",
            "log_level": "warning",
            "enable_with": "FERRYMAN_SIM_SCRIPTS=true",
        }
    ]


def test_real_providers_open_their_window_narrow_and_the_sim_does_not() -> None:
    settings = Settings.model_validate(
        {
            "providers": {
                "local": {"kind": "openai", "base_url": "http://127.0.0.1:1/v1"},
                "known": {
                    "kind": "openai",
                    "base_url": "http://127.0.0.1:1/v1",
                    "max_concurrency": 200,
                    "start_concurrency": 100,
                    "requests_per_minute": 600,
                },
                "double": {"kind": "sim"},
            }
        }
    )
    assert call_budgets(settings) == {
        "local": CallBudget(max_concurrency=64, start_concurrency=DEFAULT_START_CONCURRENCY),
        "known": CallBudget(max_concurrency=200, requests_per_minute=600, start_concurrency=100),
        "double": CallBudget(max_concurrency=64, start_concurrency=None),
    }


async def test_a_runtime_that_calls_no_model_needs_no_key_until_a_model_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    settings = Settings.model_validate(
        {
            "database_url": f"sqlite:///{tmp_path / 'f.db'}",
            "results_url": f"file://{tmp_path / 'r'}",
            "providers": {"openai": {"kind": "openai"}},
            "models": {"fast": {"provider": "openai", "model": "gpt-4o-mini"}},
        }
    )
    # One that calls models stops at start, before it makes a database.
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY, which is not set"):
        async with open_runtime(settings):
            pass
    assert not (tmp_path / "f.db").exists()

    async with open_runtime(settings, call_models=False) as runtime:
        assert runtime.intake.model_names() == ["fast", "sim"]
        provider = runtime.catalog.route("fast").provider
        assert provider.name == "openai"
        # Asked to call after all, it fails as it would have at start: never keyless.
        with pytest.raises(ConfigurationError, match="OPENAI_API_KEY, which is not set"):
            await provider.check()


@pytest.mark.parametrize(("floor", "writable"), [(0, True), (2**62, False)])
async def test_the_results_free_space_floor_is_the_setting(
    tmp_path: Path, floor: int, writable: bool
) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'f.db'}",
        results_url=f"file://{tmp_path / 'r'}",
        results_min_free_bytes=floor,
    )
    async with open_runtime(settings) as runtime:
        await runtime.prepare_storage()
        # Below the floor the store is unavailable: workers take no new call.
        assert await runtime.result_writer.probe() is writable
