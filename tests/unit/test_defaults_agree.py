"""One default per knob: a constructor or function that takes a setting has Settings'
default for it, so what a test, a benchmark or an embedding program builds without
naming the setting behaves as a deployment that left it unset.

Services never import config (the layers forbid it), so each keeps its own literal;
this test holds every such literal to Settings, walking its sections. A parameter is a
setting's when it has the setting's flat name (``lease_seconds``, ``tenant_burst``: the
name the knob had before sections, still read), a top-level field's name, or is listed
in ALIASES with the place it stands for (``retries.backoff_coefficient``)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from ferryman.config import FLAT_NAMES, SECTIONS, Settings

PACKAGES = (
    "ferryman.core",
    "ferryman.services",
    "ferryman.http",
    "ferryman.adapters",
    "ferryman.providers",
    "ferryman.observability",
)
MODULES = ("ferryman.engines",)
# (qualified callable, parameter) -> the place in Settings it stands for.
ALIASES = {
    ("ferryman.core.retry.RetryPolicy", "initial_interval_seconds"): (
        "retries.initial_interval_seconds"
    ),
    ("ferryman.core.retry.RetryPolicy", "backoff_coefficient"): "retries.backoff_coefficient",
    ("ferryman.core.retry.RetryPolicy", "maximum_interval_seconds"): (
        "retries.maximum_interval_seconds"
    ),
    ("ferryman.services.intake.TenantQuotas", "max_backlog"): "tenants.max_backlog",
    ("ferryman.services.intake.TenantQuotas", "max_stored_jobs"): "tenants.max_stored_jobs",
    ("ferryman.services.sweeper.Sweeper", "interval_seconds"): "sweeper.interval_seconds",
    ("ferryman.adapters.files.store.FileResultStore", "min_free_bytes"): ("results.min_free_bytes"),
    ("ferryman.observability.logging.configure_logging", "level"): "log.level",
}
# Parameters named like a knob that are not its default: a registry, a catalog, a
# provider's own HTTP connection pool (not the API's max_connections), and the
# simulated model, a test double whose point is to be scripted (wiring passes the
# deployment's sim.scripts, off by default, to the one a deployment runs).
NOT_KNOBS = {
    ("ferryman.http.app.AppDeps", "tasks"),
    ("ferryman.http.bodies.describe_task_bodies", "models"),
    ("ferryman.http.openapi.install_openapi", "models"),
    ("ferryman.providers.anthropic.AnthropicProvider", "max_connections"),
    ("ferryman.providers.bedrock.BedrockProvider", "max_connections"),
    ("ferryman.providers.http_api.HttpApi", "max_connections"),
    ("ferryman.providers.openai.OpenAIProvider", "max_connections"),
}
SETTINGS = Settings.model_validate({})  # the defaults, whatever the environment holds
# Every knob's place, dotted (``worker.lease_seconds``), by each name a parameter may
# have: its flat name, and a top-level field's own name.
PLACES = {
    **{flat: f"{section}.{field}" for flat, (section, field) in FLAT_NAMES.items()},
    **{name: name for name in Settings.model_fields if name not in SECTIONS},
}


def default_of(place: str) -> Any:
    """The Settings default at a place, found by walking its sections."""
    value: Any = SETTINGS
    for part in place.split("."):
        value = getattr(value, part)
    return value


# Where a layer's default and Settings' meet only through a rule (None: work it out),
# each side's value once worked out, by the same rule the code applies.
WORKED_OUT: dict[tuple[str, str], tuple[Any, Any]] = {
    # Settings: unset means visibility timeout + lease; the sweeper's literal is that sum.
    ("ferryman.services.sweeper.Sweeper", "stalled_after_seconds"): (
        inspect.signature(importlib.import_module("ferryman.services.sweeper").Sweeper)
        .parameters["stalled_after_seconds"]
        .default,
        SETTINGS.stalled_seconds,
    ),
    # The worker: None means 1.5 times its provider timeout (services/attempt.py).
    ("ferryman.services.attempt.attempt_timeouts", "attempt_timeout_seconds"): (
        1.5 * SETTINGS.worker.provider_timeout_seconds,
        SETTINGS.worker.attempt_timeout_seconds,
    ),
}


def _modules() -> Iterator[ModuleType]:
    for name in PACKAGES:
        package = importlib.import_module(name)
        for found in pkgutil.walk_packages(package.__path__, f"{name}."):
            yield importlib.import_module(found.name)
    for name in MODULES:
        yield importlib.import_module(name)


def _knobs() -> list[tuple[str, str, Any, str]]:
    """(callable, parameter, its default, the Settings place) for every knob found."""
    found = []
    for module in _modules():
        for name, obj in vars(module).items():
            if getattr(obj, "__module__", None) != module.__name__ or not callable(obj):
                continue
            qualified = f"{module.__name__}.{name}"
            try:
                parameters = inspect.signature(obj).parameters
            except (TypeError, ValueError):
                continue
            for parameter in parameters.values():
                place = ALIASES.get((qualified, parameter.name), PLACES.get(parameter.name))
                if (
                    parameter.default is inspect.Parameter.empty
                    or place is None
                    or (qualified, parameter.name) in NOT_KNOBS
                ):
                    continue
                found.append((qualified, parameter.name, parameter.default, place))
    return found


KNOBS = _knobs()


def test_the_scan_finds_the_knobs_it_is_meant_to() -> None:
    named = {(q, p) for q, p, _, _ in KNOBS}
    assert {
        ("ferryman.http.app.AppDeps", "tenant_rate_per_second"),
        ("ferryman.services.worker_parts.WorkerOptions", "tenant_max_share"),
        ("ferryman.services.worker_parts.WorkerOptions", "receive_linger_seconds"),
        ("ferryman.core.retry.RetryPolicy", "backoff_coefficient"),
        ("ferryman.engines.EngineOptions", "sqlite_synchronous"),
        ("ferryman.engines.EngineOptions", "postgres_pool_max_size"),
        ("ferryman.http.connections.ConnectionLimits", "max_slow_heads"),
    } <= named
    assert set(ALIASES) <= named
    assert NOT_KNOBS.isdisjoint(named)


def test_every_place_named_here_is_a_knob_of_settings() -> None:
    for place in {*ALIASES.values(), *PLACES.values()}:
        default_of(place)  # AttributeError for a place that is not there


@pytest.mark.parametrize(
    ("qualified", "parameter", "default", "place"), KNOBS, ids=lambda v: str(v)[:60]
)
def test_each_layers_default_is_the_settings_default(
    qualified: str, parameter: str, default: Any, place: str
) -> None:
    expected = default_of(place)
    if (qualified, parameter) in WORKED_OUT:
        default, expected = WORKED_OUT[qualified, parameter]
    assert default == expected, (
        f"{qualified}({parameter}={default!r}): Settings.{place} is {expected!r}"
    )
