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
        "prices_given": True,
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


UNPRICED = """
[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"

[models.llama]
provider = "local"
model = "llama3.2"

[models.free]
provider = "local"
model = "llama3.2"
input_price_per_mtok = 0
output_price_per_mtok = 0
"""


def test_models_marks_an_alias_that_gives_no_prices_but_not_one_priced_at_zero(
    tmp_path: Path, ferryman: Callable[..., Any]
) -> None:
    (tmp_path / "ferryman.toml").write_text(UNPRICED)

    table = ferryman(tmp_path, "models", "--no-check")
    as_json = ferryman(tmp_path, "models", "--no-check", "--json")

    assert table.returncode == 0, table.stderr
    [llama] = [line for line in table.stdout.splitlines() if " llama " in line]
    [free] = [line for line in table.stdout.splitlines() if " free " in line]
    assert llama.count("unset") == 2
    assert "unset" not in free
    assert table.stderr.splitlines() == [
        "warning: models.llama gives no input_price_per_mtok or output_price_per_mtok: "
        "its calls' cost shows as $0 (give 0 for a free model)"
    ]
    given = {m["alias"]: m["prices_given"] for m in json.loads(as_json.stdout)["models"]}
    assert given == {"llama": False, "free": True, "sim": True}


def test_doctor_warns_about_an_alias_without_prices_on_a_line_of_its_own(
    tmp_path: Path, ferryman: Callable[..., Any]
) -> None:
    (tmp_path / "ferryman.toml").write_text(UNPRICED)
    assert ferryman(tmp_path, "migrate").returncode == 0

    done = ferryman(tmp_path, "doctor")

    # It fails only on the provider nobody answers for; the prices are a warning.
    assert done.returncode == 1
    warned = [line for line in done.stdout.splitlines() if line.startswith("WARN ")]
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAIL ")]
    assert warned == [
        "WARN model prices given (llama (no input_price_per_mtok or output_price_per_mtok)): "
        "set input_price_per_mtok and output_price_per_mtok in [models.llama] (0 for a free "
        "model), or its calls' cost shows as $0"
    ]
    assert [line.split(" (")[0] for line in failed] == ["FAIL provider local reachable"]
