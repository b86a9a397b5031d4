"""`ferryman models` and doctor's provider checks, as an operator runs them."""

from __future__ import annotations

import json
import subprocess
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

CONFIG = """
[providers.local]
kind = "sim"
timeout_seconds = 20

[models.fast]
provider = "local"
model = "sim"
input_price_per_mtok = 0.15
output_price_per_mtok = 0.6
fallbacks = ["sim"]
"""


@pytest.fixture
def ferryman(ferryman_cli: Callable[..., subprocess.CompletedProcess[str]]) -> Callable[..., Any]:
    return ferryman_cli


def test_models_lists_every_alias_with_its_provider_prices_and_fallbacks(
    tmp_path: Path, ferryman: Callable[..., Any]
) -> None:
    (tmp_path / "ferryman.toml").write_text(CONFIG)

    done = ferryman(tmp_path, "models", "--json")

    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    fast = next(m for m in listing["models"] if m["alias"] == "fast")
    assert fast == {
        "alias": "fast",
        "provider": "local",
        "model": "sim",
        "input_price_per_mtok": 0.15,
        "output_price_per_mtok": 0.6,
        "fallbacks": ["sim"],
    }
    assert {p["name"]: p["ok"] for p in listing["providers"]} == {"local": True, "sim": True}


def test_a_model_naming_an_unknown_provider_is_a_configuration_error(
    tmp_path: Path, ferryman: Callable[..., Any]
) -> None:
    (tmp_path / "ferryman.toml").write_text('[models.fast]\nprovider = "nowhere"\nmodel = "x"\n')

    done = ferryman(tmp_path, "models")

    assert done.returncode == 2
    assert "models.fast.provider" in done.stderr and "nowhere" in done.stderr


def test_doctor_fails_a_provider_timeout_that_leaves_the_attempt_no_room(
    tmp_path: Path, ferryman: Callable[..., Any]
) -> None:
    (tmp_path / "ferryman.toml").write_text(
        CONFIG.replace("timeout_seconds = 20", "timeout_seconds = 50")
    )
    assert ferryman(tmp_path, "migrate").returncode == 0

    done = ferryman(tmp_path, "doctor")

    assert done.returncode == 1
    assert "providers.local.timeout_seconds" in done.stdout
