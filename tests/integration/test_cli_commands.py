"""The CLI as a user runs it: one subprocess per command, in a fresh directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

from ferryman.config import Settings
from ferryman.core.clock import FakeClock
from ferryman.services.intake import SubmitRequest
from ferryman.wiring import open_runtime

if TYPE_CHECKING:
    from pathlib import Path

COMMAND_TIMEOUT_SECONDS = 60
# Nothing listens here: a command that tried to connect would fail with exit 1, not 2.
NOWHERE_URL = "http://127.0.0.1:9"


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
    env.update(extra)
    return env


def ferryman(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ferryman.cli.main", *args],
        cwd=cwd,
        env=env if env is not None else cli_env(),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )


def test_help_lists_every_command(tmp_path: Path) -> None:
    done = ferryman(tmp_path, "--help")
    assert done.returncode == 0
    commands = ("serve", "api", "worker", "keys", "submit", "status", "doctor", "dlq", "purge")
    for command in (*commands, "list", "events", "cancel", "pause", "resume", "models"):
        assert f" {command} " in done.stdout, command


@pytest.mark.parametrize(
    ("command", "variables"),
    [
        (("serve",), ("FERRYMAN_HOST", "FERRYMAN_PORT")),
        (("api",), ("FERRYMAN_HOST", "FERRYMAN_PORT")),
        (("worker",), ("FERRYMAN_WORKER_CONCURRENCY",)),
        (("submit",), ("FERRYMAN_URL", "FERRYMAN_API_KEY")),
        (("status",), ("FERRYMAN_URL", "FERRYMAN_API_KEY")),
        (("list",), ("FERRYMAN_URL", "FERRYMAN_API_KEY")),
        (("events",), ("FERRYMAN_URL", "FERRYMAN_API_KEY")),
        (("cancel",), ("FERRYMAN_URL", "FERRYMAN_API_KEY")),
    ],
)
def test_help_shows_each_option_s_variable_and_default(
    tmp_path: Path, command: tuple[str, ...], variables: tuple[str, ...]
) -> None:
    done = ferryman(tmp_path, *command, "--help", env=cli_env(COLUMNS="250"))
    assert done.returncode == 0, done.stderr
    for variable in variables:
        assert f"env var: {variable}]" in done.stdout
    assert done.stdout.count("[default: ") >= len(variables)


def test_python_dash_m_ferryman_is_the_command(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ferryman", "--version"],
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ferryman 0.1.0"


def test_keys_create_prints_the_key_alone_and_names_the_database_it_made(
    tmp_path: Path,
) -> None:
    done = ferryman(tmp_path, "keys", "create", "--tenant", "acme")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("fm_")
    assert " " not in lines[0]
    database = tmp_path.resolve() / "ferryman.db"
    assert database.exists()
    # It had to make the database: said loudly, by absolute path, with how to point elsewhere.
    assert f"no database at {database}" in done.stderr
    assert "FERRYMAN_DATABASE_URL" in done.stderr
    assert f"stored in {database}" in done.stderr
    assert lines[0] not in done.stderr


def test_keys_create_into_an_existing_database_names_it_without_alarm(tmp_path: Path) -> None:
    elsewhere = tmp_path / "server"
    elsewhere.mkdir()
    assert ferryman(elsewhere, "migrate").returncode == 0
    env = cli_env(FERRYMAN_DATABASE_URL=f"sqlite:///{elsewhere}/ferryman.db")
    done = ferryman(tmp_path, "keys", "create", "--tenant", "acme", env=env)
    assert done.returncode == 0, done.stderr
    assert f"stored in {elsewhere.resolve()}/ferryman.db" in done.stderr
    assert "warning" not in done.stderr
    assert not (tmp_path / "ferryman.db").exists()


def test_keys_create_gives_a_new_key_each_time(tmp_path: Path) -> None:
    first = ferryman(tmp_path, "keys", "create", "--tenant", "ops", "--admin")
    second = ferryman(tmp_path, "keys", "create", "--tenant", "ops", "--admin")
    assert first.returncode == second.returncode == 0
    assert first.stdout != second.stdout


def test_keys_create_refuses_a_bad_tenant_name(tmp_path: Path) -> None:
    done = ferryman(tmp_path, "keys", "create", "--tenant", "no spaces allowed")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "tenant" in done.stderr


def test_submit_with_bad_json_exits_2_and_sends_nothing(tmp_path: Path) -> None:
    env = cli_env(FERRYMAN_URL=NOWHERE_URL, FERRYMAN_API_KEY="fm_x")
    done = ferryman(tmp_path, "submit", "--task", "generate", "--input", '{"prompt": ', env=env)
    assert done.returncode == 2
    assert "--input is not valid JSON" in done.stderr
    assert done.stdout == ""


def test_submit_needs_a_json_object(tmp_path: Path) -> None:
    env = cli_env(FERRYMAN_URL=NOWHERE_URL, FERRYMAN_API_KEY="fm_x")
    done = ferryman(tmp_path, "submit", "--task", "generate", "--input", "[1, 2]", env=env)
    assert done.returncode == 2
    assert "JSON object" in done.stderr


def test_submit_without_an_api_key_says_how_to_get_one(tmp_path: Path) -> None:
    env = cli_env(FERRYMAN_URL=NOWHERE_URL)
    done = ferryman(tmp_path, "submit", "--task", "generate", "--input", "{}", env=env)
    assert done.returncode == 2
    assert "FERRYMAN_API_KEY" in done.stderr


@pytest.mark.parametrize(
    "command",
    [
        ("submit", "--task", "generate", "--input", "{}"),
        ("submit", "--task", "generate", "--input", "{}", "--wait"),
        ("status", "gen_01ARZ3NDEKTSV4RRFFQ69G5FAV"),
        ("list",),
        ("events", "gen_01ARZ3NDEKTSV4RRFFQ69G5FAV"),
        ("cancel", "gen_01ARZ3NDEKTSV4RRFFQ69G5FAV"),
    ],
)
def test_an_unreachable_api_is_said_at_once_with_the_url_and_how_to_change_it(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    env = cli_env(FERRYMAN_URL=NOWHERE_URL, FERRYMAN_API_KEY="fm_x")
    started = time.monotonic()
    # The default --retry-for (60 s) would be spent if the first refusal were retried.
    done = ferryman(tmp_path, *command, env=env)
    assert time.monotonic() - started < 20
    assert done.returncode == 1
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()  # one line, said once
    assert line.startswith(f"error: cannot reach ferryman at {NOWHERE_URL} (from FERRYMAN_URL)")
    assert "--url" in line
    assert "FERRYMAN_URL" in line
    assert "retrying" not in line


def test_an_unreachable_url_from_the_flag_is_named_as_such(tmp_path: Path) -> None:
    env = cli_env(FERRYMAN_API_KEY="fm_x")
    done = ferryman(tmp_path, "list", "--url", "http://127.0.0.1:9/", env=env)
    assert done.returncode == 1
    assert "cannot reach ferryman at http://127.0.0.1:9/ (from --url" in done.stderr


def test_doctor_only_looks_a_missing_database_fails_and_nothing_is_created(
    tmp_path: Path,
) -> None:
    env = cli_env(FERRYMAN_DATABASE_URL="sqlite:///./data/ferryman.db")
    done = ferryman(tmp_path, "doctor", env=env)
    assert done.returncode == 1
    assert f"no database at {tmp_path.resolve()}/data/ferryman.db" in done.stdout
    assert "2 check(s) failed" in done.stdout  # the database and the results directory
    assert list(tmp_path.iterdir()) == []


def test_doctor_passes_once_migrate_has_made_the_database_and_results_directory(
    tmp_path: Path,
) -> None:
    made = ferryman(tmp_path, "migrate")
    assert made.returncode == 0, made.stderr
    assert f"created the database {tmp_path.resolve()}/ferryman.db" in made.stderr
    assert f"created the results directory {tmp_path.resolve()}/ferryman-results" in made.stderr
    again = ferryman(tmp_path, "migrate")
    assert again.returncode == 0
    assert "created" not in again.stderr
    assert "schema already at version" in again.stderr
    files = sorted(p.name for p in tmp_path.iterdir())

    done = ferryman(tmp_path, "doctor")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAIL" not in done.stdout
    assert "database reachable" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == files


def test_an_unknown_ferryman_variable_is_a_warning_everywhere_and_fails_doctor(
    tmp_path: Path,
) -> None:
    assert ferryman(tmp_path, "migrate").returncode == 0
    env = cli_env(FERRYMAN_MAX_RECIEVES="3")
    expected = "FERRYMAN_MAX_RECIEVES is not a ferryman setting"
    listed = ferryman(tmp_path, "keys", "list", env=env)
    assert listed.returncode == 0
    assert expected in listed.stderr
    assert "did you mean FERRYMAN_MAX_RECEIVES?" in listed.stderr
    doctor = ferryman(tmp_path, "doctor", env=env)
    assert doctor.returncode == 1
    assert expected in doctor.stderr
    assert "FAIL FERRYMAN_* names known (FERRYMAN_MAX_RECIEVES)" in doctor.stdout


def test_version(tmp_path: Path) -> None:
    done = ferryman(tmp_path, "--version")
    assert done.returncode == 0
    assert done.stdout.startswith("ferryman 0.")


def test_doctor_fails_with_too_few_receives(tmp_path: Path) -> None:
    done = ferryman(tmp_path, "doctor", env=cli_env(FERRYMAN_MAX_RECEIVES="3"))
    assert done.returncode == 1
    assert "FAIL" in done.stdout
    assert "FERRYMAN_MAX_RECEIVES" in done.stdout


def test_doctor_reads_a_toml_file(tmp_path: Path) -> None:
    (tmp_path / "ferryman.toml").write_text("attempt_timeout_seconds = 90\n")
    done = ferryman(tmp_path, "doctor")
    assert done.returncode == 1
    assert "FERRYMAN_LEASE_SECONDS" in done.stdout


@pytest.mark.parametrize(
    "command", [("keys", "list"), ("serve",), ("doctor",), ("models", "--no-check")]
)
@pytest.mark.parametrize("field", ["api_key_env", "api_key"])
def test_a_key_written_in_the_configuration_is_refused_and_never_printed(
    tmp_path: Path, command: tuple[str, ...], field: str
) -> None:
    key = "sk-proj-4fQ9xT2mZ8LkW1vB7nR3cY6hJ0aD5eG"
    (tmp_path / "ferryman.toml").write_text(
        f'[providers.openai]\nkind = "openai"\n{field} = "{key}"\n'
    )
    done = ferryman(tmp_path, *command)
    assert done.returncode == 2, done.stderr
    assert "api_key_env" in done.stderr
    assert key not in done.stdout + done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ferryman.toml"]


def test_commands_that_look_need_an_existing_database(tmp_path: Path) -> None:
    for command in (("dlq", "list"), ("keys", "list"), ("keys", "revoke", "0123456789ab")):
        done = ferryman(tmp_path, *command)
        assert done.returncode == 1, command
        assert f"no database at {tmp_path.resolve()}/ferryman.db" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_dlq_list_on_an_empty_database(tmp_path: Path) -> None:
    assert ferryman(tmp_path, "migrate").returncode == 0
    done = ferryman(tmp_path, "dlq", "list")
    assert done.returncode == 0, done.stderr
    assert "No dead-lettered jobs" in done.stderr
    as_json = ferryman(tmp_path, "dlq", "list", "--json")
    assert as_json.returncode == 0
    assert json.loads(as_json.stdout) == {
        "data": [],
        "next_cursor": None,
        "undecodable_letters": 0,
    }


def test_dlq_replay_of_nothing_replayable_lists_the_skips_and_exits_1(tmp_path: Path) -> None:
    assert ferryman(tmp_path, "migrate").returncode == 0
    done = ferryman(tmp_path, "dlq", "replay", "gen_missing", "--reason", "test")
    assert done.returncode == 1, done.stderr
    assert done.stdout.strip() == "skipped gen_missing (not_found)"
    as_json = ferryman(tmp_path, "dlq", "replay", "gen_missing", "--reason", "test", "--json")
    assert as_json.returncode == 1, as_json.stderr
    assert json.loads(as_json.stdout) == {
        "replayed": [],
        "skipped": [{"job_id": "gen_missing", "reason": "not_found"}],
    }


def test_dlq_replay_requires_a_reason(tmp_path: Path) -> None:
    done = ferryman(tmp_path, "dlq", "replay", "gen_missing")
    assert done.returncode == 2


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("FERRYMAN_LEASE_SECONDS", "-5", "FERRYMAN_LEASE_SECONDS"),
        ("FERRYMAN_DATABASE_URL", "aws://", "a NAME is needed"),
        ("FERRYMAN_DATABASE_URL", "aws://x?region=eu-west-1", "unknown parameter 'region'"),
        ("FERRYMAN_RESULTS_URL", "s3://Bad_Bucket/prefix", "bucket name 'Bad_Bucket'"),
        ("FERRYMAN_DATABASE_URL", "mysql://db", "sqlite:///"),
    ],
)
def test_bad_configuration_exits_2_with_the_reason(
    tmp_path: Path, variable: str, value: str, expected: str
) -> None:
    done = ferryman(tmp_path, "dlq", "list", env=cli_env(**{variable: value}))
    assert done.returncode == 2
    assert expected in done.stderr
    assert "Traceback" not in done.stderr


async def _old_jobs(directory: Path, *, finished: int, waiting: int) -> list[str]:
    """Jobs made in 2023 (a FakeClock), ``finished`` of them run to the end; their ids."""
    settings = Settings(
        database_url=f"sqlite:///{directory}/ferryman.db",
        results_url=f"file://{directory}/ferryman-results",
    )
    ids = []
    async with open_runtime(settings, clock=FakeClock()) as runtime:
        for i in range(finished + waiting):
            submission = await runtime.intake.submit(
                tenant_id="acme",
                request=SubmitRequest(task="generate", input={"prompt": f"old {i}"}),
            )
            ids.append(submission.job.job_id)
            if i == finished - 1:
                await runtime.new_worker().run_until_idle()
    return ids


async def test_purge_removes_old_finished_jobs_and_keeps_unfinished_ones(tmp_path: Path) -> None:
    ids = await _old_jobs(tmp_path, finished=3, waiting=2)

    done = ferryman(tmp_path, "purge", "--older-than", "30d", "--json")

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["jobs"] == 3
    assert report["result_bytes_reclaimed"] >= 0
    settings = Settings(database_url=f"sqlite:///{tmp_path}/ferryman.db")
    async with open_runtime(settings) as runtime:
        left = [job_id for job_id in ids if await runtime.store.get(job_id) is not None]
    assert left == ids[3:]
    again = ferryman(tmp_path, "purge", "--older-than", "30d")
    assert again.returncode == 0
    assert again.stdout.startswith("purged 0 finished jobs")


@pytest.mark.parametrize("age", ["30", "thirty days", "-1d", "0d"])
def test_purge_needs_a_positive_age_with_a_unit(tmp_path: Path, age: str) -> None:
    assert ferryman(tmp_path, "migrate").returncode == 0

    done = ferryman(tmp_path, "purge", "--older-than", age)

    assert done.returncode == 2
    assert "--older-than" in done.stderr


async def test_dlq_replay_takes_model_failures_only_when_asked(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/ferryman.db",
        results_url=f"file://{tmp_path}/ferryman-results",
        sim_scripts=True,
    )
    async with open_runtime(settings) as runtime:
        submission = await runtime.intake.submit(
            tenant_id="acme",
            request=SubmitRequest(
                task="generate", input={"prompt": "p", "simulate": {"script": ["refuse", "ok"]}}
            ),
        )
        await runtime.new_worker().run_until_idle()
    job_id = submission.job.job_id

    plain = ferryman(tmp_path, "dlq", "replay", job_id, "--reason", "policy changed")
    included = ferryman(
        tmp_path, "dlq", "replay", job_id, "--reason", "policy changed", "--include-failed"
    )

    assert plain.stdout.strip() == f"skipped {job_id} (not_dead_lettered)"
    assert plain.returncode == 1
    assert included.stdout.strip() == f"replayed {job_id}"
    assert included.returncode == 0, included.stderr


async def _dead_letter(directory: Path) -> str:
    """A job stranded the way a crash loop strands one: its message received past
    max_receives without any outcome, then failed as dead_lettered by the sweeper."""
    settings = Settings(
        database_url=f"sqlite:///{directory}/ferryman.db",
        results_url=f"file://{directory}/ferryman-results",
        max_receives=2,
    )
    clock = FakeClock()
    async with open_runtime(settings, clock=clock) as runtime:
        submission = await runtime.intake.submit(
            tenant_id="acme", request=SubmitRequest(task="generate", input={"prompt": "p"})
        )
        for _ in range(3):
            await runtime.queue.receive(max_messages=10, visibility_timeout_seconds=1.0)
            clock.advance(2.0)
        await runtime.new_sweeper().sweep_once()
        job = await runtime.store.get(submission.job.job_id)
    assert job is not None and job.error is not None and job.error.code == "dead_lettered"
    return job.job_id


async def test_dlq_list_shows_dead_letters_whole_and_as_the_api_s_json(tmp_path: Path) -> None:
    job_id = await _dead_letter(tmp_path)

    table = ferryman(tmp_path, "dlq", "list", env=cli_env(COLUMNS="30"))
    as_json = ferryman(tmp_path, "dlq", "list", "--json")

    assert table.returncode == 0, table.stderr
    assert job_id in table.stdout  # whole, however narrow the terminal
    assert as_json.returncode == 0, as_json.stderr
    (item,) = json.loads(as_json.stdout)["data"]
    # GET /v1/admin/dead-letters's item: the job as its tenant sees it, plus whose it is.
    assert (item["job_id"], item["tenant_id"], item["status"]) == (job_id, "acme", "FAILED")
    assert item["error"]["code"] == "dead_lettered"
    assert {"created_at", "completed_at", "attempt_count", "task", "model"} <= set(item)


async def test_dlq_replay_of_some_replays_them_lists_the_rest_and_exits_1(
    tmp_path: Path,
) -> None:
    job_id = await _dead_letter(tmp_path)

    done = ferryman(tmp_path, "dlq", "replay", job_id, "gen_missing", "--reason", "fixed")
    again = ferryman(tmp_path, "dlq", "replay", job_id, "--reason", "fixed", "--json")

    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [f"replayed {job_id}", "skipped gen_missing (not_found)"]
    # Replayed already: nothing left to replay, and the JSON says why.
    assert again.returncode == 1, again.stderr
    assert json.loads(again.stdout)["replayed"] == []
