"""One default per knob: a constructor or function that takes a setting has Settings'
default for it, so what a test, a benchmark or an embedding program builds without
naming the setting behaves as a deployment that left it unset.

Services never import config (the layers forbid it), so each keeps its own literal;
this test holds every such literal to Settings. A parameter is a setting's when it has
the setting's name, or a name listed in ALIASES."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from ferryman.config import Settings

PACKAGES = ("ferryman.core", "ferryman.services", "ferryman.http", "ferryman.adapters")
MODULES = ("ferryman.engines",)
# (qualified callable, parameter) -> the Settings field it stands for.
ALIASES = {
    (
        "ferryman.core.retry.RetryPolicy",
        "initial_interval_seconds",
    ): "retry_initial_interval_seconds",
    ("ferryman.core.retry.RetryPolicy", "backoff_coefficient"): "retry_backoff_coefficient",
    (
        "ferryman.core.retry.RetryPolicy",
        "maximum_interval_seconds",
    ): "retry_maximum_interval_seconds",
}
# Parameters named like a field that are not a knob's default (a registry, a catalog).
NOT_KNOBS = {
    ("ferryman.http.app.AppDeps", "tasks"),
    ("ferryman.http.bodies.describe_task_bodies", "models"),
    ("ferryman.http.openapi.install_openapi", "models"),
}
SETTINGS = Settings()


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
        1.5 * SETTINGS.provider_timeout_seconds,
        SETTINGS.attempt_timeout_seconds,
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
    """(callable, parameter, its default, the Settings field) for every knob found."""
    fields = Settings.model_fields
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
                field = ALIASES.get((qualified, parameter.name), parameter.name)
                if (
                    parameter.default is inspect.Parameter.empty
                    or field not in fields
                    or (qualified, parameter.name) in NOT_KNOBS
                ):
                    continue
                found.append((qualified, parameter.name, parameter.default, field))
    return found


KNOBS = _knobs()


def test_the_scan_finds_the_knobs_it_is_meant_to() -> None:
    named = {(q, p) for q, p, _, _ in KNOBS}
    assert {
        ("ferryman.http.app.AppDeps", "tenant_rate_per_second"),
        ("ferryman.services.worker_parts.WorkerSettings", "tenant_max_share"),
        ("ferryman.services.worker_parts.WorkerSettings", "receive_linger_seconds"),
        ("ferryman.core.retry.RetryPolicy", "backoff_coefficient"),
        ("ferryman.engines.EngineOptions", "sqlite_synchronous"),
    } <= named
    assert set(ALIASES) <= named


@pytest.mark.parametrize(
    ("qualified", "parameter", "default", "field"), KNOBS, ids=lambda v: str(v)[:60]
)
def test_each_layers_default_is_the_settings_default(
    qualified: str, parameter: str, default: Any, field: str
) -> None:
    expected = Settings.model_fields[field].default
    if (qualified, parameter) in WORKED_OUT:
        default, expected = WORKED_OUT[qualified, parameter]
    assert default == expected, (
        f"{qualified}({parameter}={default!r}): Settings.{field} is {expected!r}"
    )
