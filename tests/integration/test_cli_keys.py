"""`ferryman keys` as an operator runs it (one subprocess per command), and a revocation
reaching every API process that shares the database."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

COMMAND_TIMEOUT_SECONDS = 60
STARTUP_TIMEOUT_SECONDS = 30
# The rule: a revoked key is refused within a second or two on every process.
REVOCATION_DEADLINE_SECONDS = 2.0


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
    env.update(extra)
    return env


def ferryman(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ferryman.cli.main", *args],
        cwd=cwd,
        env=cli_env(**env),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )


def create(cwd: Path, *args: str) -> str:
    done = ferryman(cwd, "keys", "create", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def key_id(key: str) -> str:
    return key.split("_")[1]


def listed(cwd: Path, *args: str) -> list[dict[str, Any]]:
    done = ferryman(cwd, "keys", "list", "--json", *args)
    assert done.returncode == 0, done.stderr
    data: list[dict[str, Any]] = json.loads(done.stdout)["data"]
    return data


def test_keys_are_listed_without_secrets_and_revoked_by_id_or_by_key(tmp_path: Path) -> None:
    admin = create(tmp_path, "--tenant", "ops", "--admin")
    acme = create(tmp_path, "--tenant", "acme", "--expires-in", "30d")
    globex = create(tmp_path, "--tenant", "globex", "--expires-at", "2099-01-31T19:00:00+01:00")

    table = ferryman(tmp_path, "keys", "list", COLUMNS="30")
    assert table.returncode == 0, table.stderr
    for key in (admin, acme, globex):
        # A narrow terminal never breaks an id across lines, and no secret is shown.
        assert key_id(key) in table.stdout
        assert key.split("_", 2)[2] not in table.stdout + table.stderr  # the secret may hold "_"
    only_acme = listed(tmp_path, "--tenant", "acme")
    assert [k["key_id"] for k in only_acme] == [key_id(acme)]
    expires = dt.datetime.fromisoformat(only_acme[0]["expires_at"].replace("Z", "+00:00"))
    assert abs(expires.timestamp() - time.time() - 30 * 86_400) < 3_600
    assert listed(tmp_path, "--tenant", "globex")[0]["expires_at"] == "2099-01-31T18:00:00.000000Z"

    by_id = ferryman(tmp_path, "keys", "revoke", key_id(acme), "--actor", "alice")
    assert by_id.returncode == 0, by_id.stderr
    assert by_id.stdout.strip() == f"revoked {key_id(acme)} (tenant acme)"
    twice = ferryman(tmp_path, "keys", "revoke", key_id(acme))
    assert twice.returncode == 0
    assert "already revoked" in twice.stdout
    assert "alice" in twice.stdout
    by_key = ferryman(tmp_path, "keys", "revoke", globex)
    assert by_key.returncode == 0, by_key.stderr
    assert globex not in by_key.stdout + by_key.stderr

    unknown = ferryman(tmp_path, "keys", "revoke", "0123456789ab")
    assert unknown.returncode == 1
    assert "No API key with id 0123456789ab" in unknown.stderr
    assert f"{tmp_path.resolve()}/ferryman.db" in unknown.stderr

    statuses = {k["key_id"]: (k["status"], k["revoked_by"]) for k in listed(tmp_path)}
    assert statuses == {
        key_id(admin): ("active", None),
        key_id(acme): ("revoked", "alice"),
        key_id(globex): ("revoked", statuses[key_id(globex)][1]),
    }
    assert str(statuses[key_id(globex)][1]).startswith("cli:")


def test_the_last_admin_key_is_kept_unless_forced(tmp_path: Path) -> None:
    admin = create(tmp_path, "--tenant", "ops", "--admin")

    kept = ferryman(tmp_path, "keys", "revoke", key_id(admin))
    assert kept.returncode == 1
    assert "last usable admin key" in kept.stderr
    assert "--force" in kept.stderr
    assert listed(tmp_path)[0]["status"] == "active"

    forced = ferryman(tmp_path, "keys", "revoke", key_id(admin), "--force")
    assert forced.returncode == 0, forced.stderr
    assert listed(tmp_path)[0]["status"] == "revoked"


@pytest.mark.parametrize(
    "flags",
    [
        ("--expires-in", "30"),  # no unit
        ("--expires-at", "2099-01-31T19:00:00"),  # no offset
        ("--expires-at", "2000-01-01T00:00:00Z"),  # in the past
        ("--expires-in", "100000w"),  # beyond a century
        ("--expires-in", "1d", "--expires-at", "2099-01-01T00:00:00Z"),
    ],
)
def test_a_bad_expiry_exits_2_and_makes_no_key(tmp_path: Path, flags: tuple[str, ...]) -> None:
    done = ferryman(tmp_path, "keys", "create", "--tenant", "acme", *flags)
    assert done.returncode == 2
    assert done.stdout == ""
    assert "expir" in done.stderr
    assert not (tmp_path / "ferryman.db").exists()


# --- every process ---------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def two_api_processes(tmp_path: Path) -> Iterator[list[str]]:
    """Two `ferryman api` processes over the database in tmp_path; yields their URLs."""
    ports = [free_port(), free_port()]
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "ferryman.cli.main", "api", "--port", str(port)],
            cwd=tmp_path,
            env=cli_env(FERRYMAN_TENANT_RATE_PER_SECOND="0"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for port in ports
    ]
    try:
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        for url, process in zip(urls, processes, strict=True):
            wait_healthy(url, process)
        yield urls
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)


def wait_healthy(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        assert process.poll() is None, "ferryman api exited during start-up"
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail("ferryman api did not become healthy in time")


@pytest.mark.slow
def test_a_revoked_key_is_refused_by_every_api_process_within_seconds(
    tmp_path: Path, two_api_processes: list[str]
) -> None:
    key = create(tmp_path, "--tenant", "acme")
    headers = {"Authorization": f"Bearer {key}"}
    for url in two_api_processes:
        assert httpx.get(f"{url}/v1/generations", headers=headers).status_code == 200

    assert ferryman(tmp_path, "keys", "revoke", key_id(key)).returncode == 0
    revoked_at = time.monotonic()

    unknown = {"Authorization": "Bearer fm_0123456789ab_" + "y" * 43}
    for url in two_api_processes:
        while True:
            answer = httpx.get(f"{url}/v1/generations", headers=headers)
            if answer.status_code == 401:
                break
            assert time.monotonic() - revoked_at < REVOCATION_DEADLINE_SECONDS, url
            time.sleep(0.05)
        assert answer.json() == httpx.get(f"{url}/v1/generations", headers=unknown).json()
