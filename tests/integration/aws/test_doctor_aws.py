"""``ferryman doctor`` on an ``aws://`` URL against the emulator: what read_live reads of
the queue, its DLQ and the Lambda event source mappings, and the CLI's verdict on them.

moto creates Lambda functions from a zip without docker (only invoking one needs it),
and serves CreateEventSourceMapping, ListEventSourceMappings and
GetFunctionConfiguration: the mapping part is read from the emulator, never stubbed.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import zipfile
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import pytest

from ferryman.adapters.aws.clients import open_clients
from ferryman.adapters.aws.live import QueueNotFoundError, read_live
from ferryman.adapters.aws.location import parse_aws_url
from ferryman.adapters.aws.provision import MESSAGE_RETENTION_SECONDS, queue_url

if TYPE_CHECKING:
    import subprocess
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from ferryman.adapters.aws.clients import AwsClients
    from ferryman.adapters.aws.location import AwsLocation


@asynccontextmanager
async def _client(service: str) -> AsyncIterator[Any]:
    from aiobotocore.session import get_session

    async with get_session().create_client(service, region_name=os.environ["AWS_REGION"]) as c:
        yield c


async def _queue_arn(clients: AwsClients, location: AwsLocation) -> str:
    url = await queue_url(clients, location.queue)
    assert url is not None
    response = await clients.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return str(response["Attributes"]["QueueArn"])


async def lambda_worker(location: AwsLocation, *, timeout_seconds: int, **mapping: Any) -> str:
    """A function named after the location (never invoked) mapped to its job queue."""
    name = f"{location.name}-worker"
    package = io.BytesIO()
    with zipfile.ZipFile(package, "w") as archive:
        archive.writestr("handler.py", "def handler(event, context):\n    return {}\n")
    async with open_clients() as clients, _client("iam") as iam, _client("lambda") as lam:
        arn = await _queue_arn(clients, location)
        role = await iam.create_role(
            RoleName=name,
            AssumeRolePolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "lambda.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                }
            ),
        )
        await lam.create_function(
            FunctionName=name,
            Runtime="python3.11",
            Role=role["Role"]["Arn"],
            Handler="handler.handler",
            Code={"ZipFile": package.getvalue()},
            Timeout=timeout_seconds,
        )
        await lam.create_event_source_mapping(EventSourceArn=arn, FunctionName=name, **mapping)
    return name


async def test_reads_the_provisioned_queue_and_dlq_and_no_mapping(aws_url: str) -> None:
    location = parse_aws_url(aws_url)
    async with open_clients() as clients:
        live = await read_live(clients, location, function_name=None)
    queue = live.queue
    assert queue.name == location.queue.name
    assert queue.visibility_timeout_seconds == 900
    assert queue.receive_wait_seconds == 20
    assert queue.retention_seconds == MESSAGE_RETENTION_SECONDS
    assert queue.max_receive_count == 10
    assert queue.dlq_arn is not None
    assert queue.dlq_arn.endswith(f":{location.dlq.name}")
    assert queue.dlq_retention_seconds == MESSAGE_RETENTION_SECONDS
    assert live.mappings == []
    assert live.missing == []


async def test_finds_the_mapping_on_the_queue_and_its_function_s_timeout(aws_url: str) -> None:
    location = parse_aws_url(aws_url)
    name = await lambda_worker(
        location,
        timeout_seconds=120,
        BatchSize=7,
        MaximumBatchingWindowInSeconds=3,
        FunctionResponseTypes=["ReportBatchItemFailures"],
        ScalingConfig={"MaximumConcurrency": 4},
    )
    async with open_clients() as clients:
        discovered = await read_live(clients, location, function_name=None)
        named = await read_live(clients, location, function_name=name)
    assert discovered.mappings == named.mappings
    (mapping,) = discovered.mappings
    assert mapping.function_name == name
    assert mapping.function_timeout_seconds == 120
    assert mapping.batch_size == 7
    assert mapping.batching_window_seconds == 3
    assert mapping.report_batch_item_failures
    assert mapping.maximum_concurrency == 4
    assert named.missing == []


async def test_a_named_function_that_does_not_consume_the_queue_is_missing(
    aws_url: str,
) -> None:
    location = parse_aws_url(aws_url)
    async with open_clients() as clients:
        live = await read_live(clients, location, function_name="no-such-function")
    assert live.mappings == []
    assert len(live.missing) == 1
    assert "no-such-function" in live.missing[0]


async def test_a_missing_queue_is_queue_not_found(aws_env: dict[str, str]) -> None:
    from aws_emulator import fresh_name

    location = parse_aws_url(f"aws://{fresh_name()}")
    async with open_clients() as clients:
        with pytest.raises(QueueNotFoundError, match=location.queue.name):
            await read_live(clients, location, function_name=None)


def _doctor(
    run: Callable[..., subprocess.CompletedProcess[str]],
    cwd: Path,
    aws_env: dict[str, str],
    url: str,
    *args: str,
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
    env.update(aws_env)
    env["FERRYMAN_DATABASE_URL"] = url
    return run(cwd, "doctor", *args, env=env)


async def test_doctor_passes_a_migrated_queue_without_a_lambda(
    aws_url: str,
    aws_env: dict[str, str],
    tmp_path: Path,
    ferryman_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    done = await asyncio.to_thread(_doctor, ferryman_cli, tmp_path, aws_env, aws_url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAIL" not in done.stdout
    assert "WARN Lambda event source mapping" in done.stdout
    assert await asyncio.to_thread(os.listdir, tmp_path) == []  # it only looked


async def test_doctor_names_each_broken_lambda_rule_and_its_fix(
    aws_url: str,
    aws_env: dict[str, str],
    tmp_path: Path,
    ferryman_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    location = parse_aws_url(aws_url)
    # 900 s of visibility is under 6 x 200 s; no partial batch responses.
    name = await lambda_worker(location, timeout_seconds=200, BatchSize=10)
    done = await asyncio.to_thread(
        _doctor, ferryman_cli, tmp_path, aws_env, aws_url, "--function", name
    )
    assert done.returncode == 1
    lines = [line for line in done.stdout.splitlines() if line.startswith("FAIL ")]
    assert len(lines) == 2, done.stdout
    assert f"set {location.queue.name}'s VisibilityTimeout to 1200" in lines[0]
    assert "ReportBatchItemFailures" in lines[1]


async def test_doctor_fails_a_redrive_count_other_than_max_receives(
    aws_url: str,
    aws_env: dict[str, str],
    tmp_path: Path,
    ferryman_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    done = _doctor(ferryman_cli, tmp_path, {**aws_env, "FERRYMAN_MAX_RECEIVES": "12"}, aws_url)
    assert done.returncode == 1
    assert "maxReceiveCount to 12" in done.stdout


def test_doctor_on_a_url_with_no_queue_says_to_migrate(
    aws_env: dict[str, str],
    tmp_path: Path,
    ferryman_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    from aws_emulator import fresh_name

    url = f"aws://{fresh_name()}"
    done = _doctor(ferryman_cli, tmp_path, aws_env, url)
    assert done.returncode == 1
    assert "FAIL job queue exists" in done.stdout
    assert "ferryman migrate" in done.stdout
