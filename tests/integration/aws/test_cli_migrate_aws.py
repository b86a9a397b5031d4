"""``ferryman migrate`` on aws://NAME, as a user runs it (a subprocess) against the emulator."""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING

from ferryman.adapters.aws.clients import open_clients
from ferryman.adapters.aws.location import parse_aws_url
from ferryman.adapters.aws.provision import provision

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


def _env(aws_env: dict[str, str], **ferryman: str) -> dict[str, str]:
    """This process's environment without its FERRYMAN_* variables, the emulator's
    AWS configuration, and the given FERRYMAN_* ones."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
    env.update(aws_env)
    env.update({f"FERRYMAN_{name.upper()}": value for name, value in ferryman.items()})
    return env


def test_migrate_makes_the_table_queues_and_bucket_then_finds_them(
    tmp_path: Path,
    aws_env: dict[str, str],
    ferryman_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    from aws_emulator import fresh_name

    name = fresh_name()
    env = _env(aws_env, database_url=f"aws://{name}", results_url=f"s3://{name}/results")

    made = ferryman_cli(tmp_path, "migrate", env=env)
    again = ferryman_cli(tmp_path, "migrate", env=env)

    assert made.returncode == 0, made.stderr
    assert made.stderr.splitlines() == [
        f"created the table {name}",
        f"created the queue {name}-jobs-dlq",
        f"created the queue {name}-jobs",
        f"created the bucket {name}",
    ]
    assert again.returncode == 0, again.stderr
    assert again.stderr.splitlines() == [
        f"found the table {name}",
        f"found the queue {name}-jobs-dlq",
        f"found the queue {name}-jobs",
        f"found the bucket {name}",
    ]
    # Nothing was made in the working directory: no database file, no results directory.
    assert list(tmp_path.iterdir()) == []


async def test_migrate_names_a_redrive_that_disagrees_with_the_setting_and_exits_1(
    tmp_path: Path,
    aws_env: dict[str, str],
    ferryman_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    from aws_emulator import fresh_name

    url = f"aws://{fresh_name()}"
    location = parse_aws_url(url)
    async with open_clients() as clients:
        await provision(clients, location, max_receives=3)

    disagrees = ferryman_cli(
        tmp_path, "migrate", env=_env(aws_env, database_url=url, max_receives="10")
    )
    agrees = ferryman_cli(
        tmp_path, "migrate", env=_env(aws_env, database_url=url, max_receives="3")
    )

    assert disagrees.returncode == 1
    assert (
        f"disagrees: queue {location.queue.name}: RedrivePolicy.maxReceiveCount is 3; it "
        "should be 10 (FERRYMAN_MAX_RECEIVES)"
    ) in disagrees.stderr
    assert "error: 1 setting of what exists disagrees with what ferryman needs" in (
        disagrees.stderr
    )
    assert "Traceback" not in disagrees.stderr
    assert agrees.returncode == 0, agrees.stderr
    assert "disagrees" not in agrees.stderr


def test_migrate_on_an_aws_url_it_cannot_use_exits_2_naming_it(
    tmp_path: Path,
    aws_env: dict[str, str],
    ferryman_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    bad_parameter = ferryman_cli(
        tmp_path, "migrate", env=_env(aws_env, database_url="aws://app?region=eu-west-1")
    )
    bad_bucket = ferryman_cli(
        tmp_path,
        "migrate",
        env=_env(aws_env, database_url="aws://app", results_url="s3://Not_A_Bucket/r"),
    )

    assert bad_parameter.returncode == 2
    assert "FERRYMAN_DATABASE_URL: aws:// URL: unknown parameter 'region'" in bad_parameter.stderr
    assert bad_bucket.returncode == 2
    assert "FERRYMAN_RESULTS_URL: s3:// URL: bucket name 'Not_A_Bucket'" in bad_bucket.stderr


def test_migrate_without_a_region_says_so_and_exits_1(
    tmp_path: Path,
    aws_env: dict[str, str],
    ferryman_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    env = _env(aws_env, database_url="aws://app")
    del env["AWS_REGION"], env["AWS_DEFAULT_REGION"]

    done = ferryman_cli(tmp_path, "migrate", env=env)

    assert done.returncode == 1
    assert "aws://app (table app, queue app-jobs, dlq app-jobs-dlq): aws: no region" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr
