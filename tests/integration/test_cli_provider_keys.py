"""Only what calls a model needs the providers' keys: the operator's commands run
without them, while serve, worker and doctor's provider check say which one is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path

COMMAND_TIMEOUT_SECONDS = 60
# Two providers whose keys come from their kinds' default variables, neither one set.
PROVIDERS = """
[providers.openai]
kind = "openai"

[providers.claude]
kind = "anthropic"

[models.fast]
provider = "openai"
model = "gpt-4o-mini"
"""
KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")


def ferryman(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("FERRYMAN_") and k not in KEY_VARIABLES
    }
    return subprocess.run(
        [sys.executable, "-m", "ferryman.cli.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    (tmp_path / "ferryman.toml").write_text(PROVIDERS)
    return tmp_path


def test_operator_commands_that_call_no_model_run_without_the_keys(deployment: Path) -> None:
    commands = [
        ("migrate",),
        ("keys", "create", "--tenant", "ops", "--admin"),
        ("keys", "list"),
        ("dlq", "list"),
        ("status",),
        ("purge", "--older-than", "30d"),
        ("pause", "workers", "--reason", "provider down"),
        ("resume", "workers"),
        ("models", "--no-check"),
    ]
    for command in commands:
        done = ferryman(deployment, *command)
        assert done.returncode == 0, (command, done.stderr)
        assert "API key" not in done.stderr, command


@pytest.mark.parametrize("command", [("serve", "--port", "0"), ("worker",)])
def test_a_process_that_calls_models_names_the_missing_key_and_makes_nothing(
    deployment: Path, command: tuple[str, ...]
) -> None:
    done = ferryman(deployment, *command)

    assert done.returncode == 2, done.stderr
    assert "OPENAI_API_KEY, which is not set" in done.stderr
    assert sorted(p.name for p in deployment.iterdir()) == ["ferryman.toml"]


def test_doctor_fails_the_provider_check_naming_the_variable(deployment: Path) -> None:
    assert ferryman(deployment, "migrate").returncode == 0

    done = ferryman(deployment, "doctor")

    assert done.returncode == 1
    assert "OPENAI_API_KEY" in done.stdout
