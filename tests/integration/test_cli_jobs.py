"""The client's commands (submit, status, list, events, cancel) against a real
`ferryman serve`: a table by default, the API's own JSON with --json."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest

if TYPE_CHECKING:
    from conftest import LiveServer

pytestmark = pytest.mark.slow

SLOW_INPUT = '{"prompt": "slow", "simulate": {"latency_ms": 20000}}'
# A terminal narrower than any id: ids must still come out whole, on one line.
NARROW = "30"


def api(server: LiveServer, key: str, path: str) -> Any:
    response = httpx.get(
        f"{server.url}{path}", headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    assert response.status_code == 200, response.text
    return response.json()


def submit(server: LiveServer, key: str, *args: str, input: str = '{"prompt": "hi"}') -> str:
    done = server.cli("submit", "--task", "generate", "--input", input, *args, FERRYMAN_API_KEY=key)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["job_id"])


def wait_done(server: LiveServer, key: str, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        job: dict[str, Any] = api(server, key, f"/v1/generations/{job_id}")
        if job["status"] in {"SUCCEEDED", "FAILED", "CANCELLED"}:
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.1)


def test_submit_wait_prints_the_result_and_each_change_once_on_stderr(
    live_server: LiveServer,
) -> None:
    key = live_server.new_key()
    done = live_server.cli(
        "submit", "--task", "generate", "--input", '{"prompt": "hello"}', "--wait",
        FERRYMAN_API_KEY=key,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"text": "echo: hello"}
    lines = done.stderr.splitlines()
    assert lines, "no progress shown"
    assert "SUCCEEDED (1 attempt" in lines[-1]
    states = [line.split(" (")[0] for line in lines]
    assert len(states) == len(set(states))  # a line only when something changed
    assert all(line.startswith("gen_") for line in lines)  # plain lines, no spinner


def test_submit_wait_on_a_failed_job_prints_the_job_and_exits_1(live_server: LiveServer) -> None:
    key = live_server.new_key()
    refused = '{"prompt": "hi", "simulate": {"script": ["refuse"]}}'
    done = live_server.cli(
        "submit", "--task", "generate", "--input", refused, "--wait", FERRYMAN_API_KEY=key
    )
    assert done.returncode == 1
    job = json.loads(done.stdout)
    assert (job["status"], job["error"]["class"]) == ("FAILED", "SAFETY_REJECTED")
    assert "FAILED (1 attempt" in done.stderr


def test_status_prints_the_api_s_json_by_default_and_a_table_when_asked(
    live_server: LiveServer,
) -> None:
    key = live_server.new_key()
    job_id = submit(live_server, key)
    wait_done(live_server, key, job_id)

    plain = live_server.cli("status", job_id, FERRYMAN_API_KEY=key)
    as_json = live_server.cli("status", job_id, "--json", FERRYMAN_API_KEY=key)
    table = live_server.cli("status", job_id, "--table", FERRYMAN_API_KEY=key, COLUMNS=NARROW)

    served = api(live_server, key, f"/v1/generations/{job_id}")
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout) == served  # scripts that read status keep working
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == served
    assert table.returncode == 0, table.stderr
    assert job_id in table.stdout  # whole, on one line, however narrow the terminal
    assert "SUCCEEDED" in table.stdout
    assert not table.stdout.lstrip().startswith("{")


def test_status_of_another_tenant_s_job_is_not_found(live_server: LiveServer) -> None:
    job_id = submit(live_server, live_server.new_key())
    done = live_server.cli("status", job_id, FERRYMAN_API_KEY=live_server.new_key())
    assert done.returncode == 1
    assert "404 not_found" in done.stderr
    assert done.stdout == ""


def test_list_pages_through_the_tenant_s_jobs(live_server: LiveServer) -> None:
    key = live_server.new_key()
    ids = [submit(live_server, key, input=f'{{"prompt": "n{i}"}}') for i in range(3)]

    first = live_server.cli("list", "--limit", "2", FERRYMAN_API_KEY=key, COLUMNS=NARROW)
    assert first.returncode == 0, first.stderr
    assert ids[2] in first.stdout and ids[1] in first.stdout  # newest first
    assert ids[0] not in first.stdout
    hint = next(line for line in first.stderr.splitlines() if line.startswith("More:"))
    cursor = hint.split("--cursor ")[1].strip()
    assert cursor == ids[1]

    rest = live_server.cli("list", "--limit", "2", "--cursor", cursor, FERRYMAN_API_KEY=key)
    assert rest.returncode == 0, rest.stderr
    assert ids[0] in rest.stdout
    assert "More:" not in rest.stderr

    as_json = live_server.cli("list", "--json", FERRYMAN_API_KEY=key)
    assert json.loads(as_json.stdout) == api(live_server, key, "/v1/generations")
    assert [job["job_id"] for job in json.loads(as_json.stdout)["data"]] == ids[::-1]


def test_list_filters_by_status_and_task(live_server: LiveServer) -> None:
    key = live_server.new_key()
    done_id = submit(live_server, key)
    wait_done(live_server, key, done_id)
    failed_id = submit(
        live_server, key, input='{"prompt": "x", "simulate": {"script": ["refuse"]}}'
    )
    wait_done(live_server, key, failed_id)

    failed = live_server.cli("list", "--status", "failed", "--json", FERRYMAN_API_KEY=key)
    other_task = live_server.cli("list", "--task", "summarize", "--json", FERRYMAN_API_KEY=key)
    bad = live_server.cli("list", "--status", "LOST", FERRYMAN_API_KEY=key)

    assert [j["job_id"] for j in json.loads(failed.stdout)["data"]] == [failed_id]
    assert json.loads(other_task.stdout) == {"data": [], "next_cursor": None}
    assert bad.returncode == 2
    empty = live_server.cli("list", "--task", "summarize", FERRYMAN_API_KEY=key)
    assert (empty.returncode, empty.stdout, empty.stderr.strip()) == (0, "", "No jobs.")


def test_events_shows_the_history_and_attempts(live_server: LiveServer) -> None:
    key = live_server.new_key()
    job_id = submit(
        live_server, key, input='{"prompt": "x", "simulate": {"script": ["server_error", "ok"]}}'
    )
    assert wait_done(live_server, key, job_id)["status"] == "SUCCEEDED"

    as_json = live_server.cli("events", job_id, "--json", FERRYMAN_API_KEY=key)
    history = json.loads(as_json.stdout)
    assert history == api(live_server, key, f"/v1/generations/{job_id}/events")

    # Narrow, ordinary and wide terminals: the attempts table is wider than 80 columns,
    # and no width may cut an id, a worker name or a time with an ellipsis.
    for columns in (NARROW, "80", "200"):
        table = live_server.cli("events", job_id, FERRYMAN_API_KEY=key, COLUMNS=columns)
        assert table.returncode == 0, table.stderr
        for kind in ("ACCEPTED", "RETRY_SCHEDULED", "SUCCEEDED"):
            assert kind in table.stdout
        assert "…" not in table.stdout
        for attempt in history["attempts"]:
            assert attempt["attempt_id"] in table.stdout
            assert attempt["worker_id"] in table.stdout
    assert [a["outcome"] for a in history["attempts"]] == ["retry", "succeeded"]


def test_cancel_a_running_job_then_again_exits_1(live_server: LiveServer) -> None:
    key = live_server.new_key()
    job_id = submit(live_server, key, input=SLOW_INPUT)

    first = live_server.cli("cancel", job_id, "--json", FERRYMAN_API_KEY=key)
    assert first.returncode == 0, first.stderr
    job = json.loads(first.stdout)
    assert job["job_id"] == job_id
    assert job["status"] == "CANCELLED" or job["cancel_requested"] is True
    assert wait_done(live_server, key, job_id)["status"] == "CANCELLED"

    again = live_server.cli("cancel", job_id, FERRYMAN_API_KEY=key)
    assert again.returncode == 1
    assert "409 already_terminal" in again.stderr


def test_cancel_shows_the_job_as_a_table(live_server: LiveServer) -> None:
    key = live_server.new_key()
    job_id = submit(live_server, key, input=SLOW_INPUT)
    done = live_server.cli("cancel", job_id, FERRYMAN_API_KEY=key, COLUMNS=NARROW)
    assert done.returncode == 0, done.stderr
    assert job_id in done.stdout
    assert "cancel requested" in done.stdout


def test_webhooks_secret_prints_a_new_secret_each_time(live_server: LiveServer) -> None:
    key = live_server.new_key()
    first = live_server.cli("webhooks", "secret", FERRYMAN_API_KEY=key)
    second = live_server.cli("webhooks", "secret", FERRYMAN_API_KEY=key)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.stdout.strip().startswith("whsec_")
    assert first.stdout.strip() != second.stdout.strip()
    assert "24 hours" in second.stderr


def test_submit_with_a_refused_webhook_url_says_why(live_server: LiveServer) -> None:
    key = live_server.new_key()
    assert live_server.cli("webhooks", "secret", FERRYMAN_API_KEY=key).returncode == 0
    done = live_server.cli(
        "submit",
        "--task",
        "generate",
        "--input",
        '{"prompt": "hi"}',
        "--webhook-url",
        "http://10.0.0.7/hook",
        FERRYMAN_API_KEY=key,
    )
    assert done.returncode == 1, done.stdout
    assert "webhook_url" in done.stderr and "https" in done.stderr
