"""What `submit --wait` shows on stderr: a spinner on a terminal, plain lines otherwise,
and in both only when the status or the attempt count changes."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from ferryman.cli import remote
from ferryman.client import Job


def job(status: str, attempts: int) -> Job:
    return Job.model_validate({"job_id": "gen_1", "status": status, "attempt_count": attempts})


POLLS = [
    job("QUEUED", 0),
    job("QUEUED", 0),
    job("PROCESSING", 1),
    job("PROCESSING", 1),
    job("RETRY_SCHEDULED", 1),
    job("PROCESSING", 2),
    job("SUCCEEDED", 2),
]


def watch(monkeypatch: pytest.MonkeyPatch, **console: Any) -> str:
    out = io.StringIO()
    monkeypatch.setattr(remote, "err_console", Console(file=out, width=200, **console))
    with remote._WaitProgress() as progress:
        for polled in POLLS:
            progress.polled(polled)
    return out.getvalue()


def test_plain_lines_only_on_change_when_stderr_is_not_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines = watch(monkeypatch, force_terminal=False).splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        "gen_1 QUEUED",
        "gen_1 PROCESSING",
        "gen_1 RETRY_SCHEDULED",
        "gen_1 PROCESSING",
        "gen_1 SUCCEEDED",
    ]
    assert "(0 attempts," in lines[0]
    assert "(2 attempts," in lines[-1]


def test_a_spinner_on_a_terminal_then_the_last_state(monkeypatch: pytest.MonkeyPatch) -> None:
    shown = watch(monkeypatch, force_terminal=True)
    assert "\x1b[?25l" in shown  # the cursor hidden while the spinner runs
    assert "SUCCEEDED (2 attempts" in shown.rstrip().splitlines()[-1]
