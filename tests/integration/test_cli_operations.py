"""The operator's commands against the database a real `ferryman serve` uses: pause,
resume, the deployment's status, keys revoke --json."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import httpx
import pytest

if TYPE_CHECKING:
    from pathlib import Path

    from conftest import LiveServer

pytestmark = pytest.mark.slow

# The API reads the switches from the database; give it a moment on a loaded machine.
SWITCH_DEADLINE_SECONDS = 10.0


def submit_status(server: LiveServer, key: str) -> int:
    response = httpx.post(
        f"{server.url}/v1/generations",
        json={"task": "generate", "input": {"prompt": "hi"}},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    return response.status_code


def eventually_status(server: LiveServer, key: str, expected: int) -> None:
    deadline = time.monotonic() + SWITCH_DEADLINE_SECONDS
    while submit_status(server, key) != expected:
        assert time.monotonic() < deadline, f"submissions never answered {expected}"
        time.sleep(0.2)


def test_pause_and_resume_intake_are_seen_by_the_api_and_by_status(
    live_server: LiveServer,
) -> None:
    key = live_server.new_key()
    paused = live_server.cli("pause", "intake", "--reason", "maintenance", "--actor", "alice")
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.strip() == "paused intake; paused now: intake"
    try:
        eventually_status(live_server, key, 503)
        refused = live_server.cli(
            "submit", "--task", "generate", "--input", '{"prompt": "x"}', "--retry-for", "0",
            FERRYMAN_API_KEY=key,
        )  # fmt: skip
        assert refused.returncode == 1
        assert "503 paused" in refused.stderr

        overview = live_server.cli("status", "--json")
        assert overview.returncode == 0, overview.stderr
        state = json.loads(overview.stdout)
        assert state["status"] == "ready"
        assert state["paused"] == ["intake"]
        assert set(state["checks"]) >= {"store", "queue"}
        assert set(state["queue"]) == {
            "visible",
            "in_flight",
            "oldest_age_seconds",
            "dead_letters",
            "undecodable_letters",
        }
        table = live_server.cli("status")
        assert table.returncode == 0, table.stderr
        assert "PAUSED" in table.stdout
    finally:
        resumed = live_server.cli("resume", "intake", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"paused": []}
    eventually_status(live_server, key, 202)

    admin = live_server.new_key(admin=True)
    audit = httpx.get(
        f"{live_server.url}/v1/admin/audit",
        headers={"Authorization": f"Bearer {admin}"},
        timeout=30,
    ).json()["data"]
    pause_record = next(r for r in audit if r["action"] == "pause" and r["target"] == "intake")
    assert (pause_record["actor"], pause_record["reason"]) == ("alice", "maintenance")


def test_pause_and_resume_workers(live_server: LiveServer) -> None:
    paused = live_server.cli("pause", "workers", "--reason", "provider incident", "--json")
    assert paused.returncode == 0, paused.stderr
    assert json.loads(paused.stdout) == {"paused": ["workers"]}
    resumed = live_server.cli("resume", "workers")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "resumed workers; paused now: nothing"


def _a_job_seen_waiting(server: LiveServer, key: str) -> dict:
    """Submit jobs until one is seen waiting for its paused provider: a worker trusts its
    look at the pauses for a second, so a job submitted just after the pause may run."""
    headers = {"Authorization": f"Bearer {key}"}
    deadline = time.monotonic() + SWITCH_DEADLINE_SECONDS
    while time.monotonic() < deadline:
        job_id = httpx.post(
            f"{server.url}/v1/generations",
            json={"task": "generate", "input": {"prompt": "hi"}},
            headers=headers,
            timeout=30,
        ).json()["job_id"]
        while time.monotonic() < deadline:
            job = httpx.get(f"{server.url}/v1/generations/{job_id}", headers=headers, timeout=30)
            body = job.json()
            if body["waiting"] is not None:
                return body
            if body["status"] == "SUCCEEDED":
                break  # taken before the worker saw the pause: try another
            time.sleep(0.1)
    raise AssertionError("no job was seen waiting for its paused provider")


def test_pause_and_resume_a_provider(live_server: LiveServer) -> None:
    key = live_server.new_key()
    paused = live_server.cli("pause", "--provider", "sim", "--reason", "key rotation")
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.strip() == "paused provider:sim; paused now: provider:sim"
    try:
        job = _a_job_seen_waiting(live_server, key)
        assert job["status"] in ("QUEUED", "RETRY_SCHEDULED")
        waiting = job["waiting"]
        assert (waiting["reason"], waiting["provider"], waiting["automatic"]) == (
            "provider_paused",
            "sim",
            False,
        )
        assert waiting["next_check_at"] is None
        assert "key rotation" not in json.dumps(job)  # an operator's words stay with operators

        table = live_server.cli("status", job["job_id"], "--table", FERRYMAN_API_KEY=key)
        assert table.returncode == 0, table.stderr
        assert "provider sim paused since" in table.stdout
        overview = live_server.cli("status", "--json")
        state = json.loads(overview.stdout)
        assert state["paused"] == ["provider:sim"]
        sim = state["paused_providers"]["sim"]
        assert (sim["automatic"], sim["reason"], sim["next_check_at"]) == (
            False,
            "key rotation",
            None,
        )
    finally:
        resumed = live_server.cli("resume", "--provider", "sim", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"paused": []}
    again = live_server.cli("resume", "--provider", "sim")
    assert again.returncode == 0
    assert "provider:sim was not paused" in again.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("pause", "intake"), "--reason"),  # a pause must say why
        (("pause", "everything", "--reason", "x"), "everything"),
        (("pause", "intake", "--reason", "  "), "--reason must say why"),
        (("pause", "--reason", "x"), "name one thing"),
        (("pause", "intake", "--provider", "sim", "--reason", "x"), "name one thing"),
        (("resume",), "name one thing"),
        (("resume", "--provider", " "), "--provider must be a provider's name"),
    ],
)
def test_pause_refuses_bad_arguments(
    live_server: LiveServer, args: tuple[str, ...], expected: str
) -> None:
    done = live_server.cli(*args)
    assert done.returncode == 2
    assert expected in done.stderr


def test_keys_revoke_json_is_the_api_s_answer(live_server: LiveServer) -> None:
    key = live_server.new_key()
    key_id = key.split("_")[1]
    done = live_server.cli("keys", "revoke", key_id, "--json", "--actor", "bob")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert (body["key_id"], body["status"], body["revoked_by"]) == (key_id, "revoked", "bob")
    assert body["already_revoked"] is False
    again = json.loads(live_server.cli("keys", "revoke", key_id, "--json").stdout)
    assert again["already_revoked"] is True
    assert again["revoked_by"] == "bob"


def test_status_without_a_job_needs_the_database(live_server: LiveServer, tmp_path: Path) -> None:
    done = live_server.cli("status", FERRYMAN_DATABASE_URL=f"sqlite:///{tmp_path}/none.db")
    assert done.returncode == 1
    assert "no database at" in done.stderr
