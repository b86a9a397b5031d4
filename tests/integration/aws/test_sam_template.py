"""deploy/aws/template.yaml: valid to cfn-lint, its table exactly layout.py's, its
default timeouts holding every rule ``ferryman doctor`` checks, its IAM least-privilege,
its sweeper on a schedule it keeps up with."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ferryman.adapters.aws.layout import TTL_ATTRIBUTE, table_definition
from ferryman.adapters.aws.timeouts import (
    LAMBDA_VISIBILITY_FACTOR,
    MappingObserved,
    QueueObserved,
    WorkerTimeouts,
    findings,
)
from ferryman.aws_lambda.batch import TIMEOUT_MARGIN_SECONDS
from ferryman.aws_lambda.sweeping import SWEEP_MARGIN_SECONDS
from ferryman.config.sections import RetrySettings, WorkerSettings
from ferryman.core.lease import LeasePolicy
from ferryman.services.delivery import PERSIST_RETRY_DELAYS_SECONDS

TEMPLATE = Path(__file__).parents[3] / "deploy" / "aws" / "template.yaml"
LINT_TIMEOUT_SECONDS = 100


class _CfnLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short forms (!Ref, !Sub, ...) read as their long form."""


def _intrinsic(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


_CfnLoader.add_multi_constructor("!", _intrinsic)


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.load(TEMPLATE.read_text(), Loader=_CfnLoader)
    return loaded


def _default(template: dict[str, Any], parameter: str) -> int:
    return int(template["Parameters"][parameter]["Default"])


def test_cfn_lint_finds_nothing() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from cfnlint.runner import main; sys.exit(main())",
            str(TEMPLATE),
        ],
        capture_output=True,
        text=True,
        timeout=LINT_TIMEOUT_SECONDS,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == ""


def test_the_table_is_layout_s_table_definition(template: dict[str, Any]) -> None:
    table = template["Resources"]["Table"]["Properties"]
    expected = table_definition("NAME")
    assert table["AttributeDefinitions"] == expected["AttributeDefinitions"]
    assert table["KeySchema"] == expected["KeySchema"]
    assert table["GlobalSecondaryIndexes"] == expected["GlobalSecondaryIndexes"]
    assert table["BillingMode"] == expected["BillingMode"]
    # CloudFormation spells CreateTable's SSESpecification.Enabled as SSEEnabled.
    assert table["SSESpecification"] == {"SSEEnabled": expected["SSESpecification"]["Enabled"]}
    assert table["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    # The template adds nothing layout.py does not know of.
    known = {*expected, "TimeToLiveSpecification", "PointInTimeRecoverySpecification"}
    assert set(table) == known


def test_visibility_default_is_at_least_six_function_timeouts(template: dict[str, Any]) -> None:
    visibility = _default(template, "QueueVisibilityTimeout")
    needed = LAMBDA_VISIBILITY_FACTOR * _default(template, "FunctionTimeout") + _default(
        template, "BatchingWindowSeconds"
    )
    assert visibility >= needed


def test_the_defaults_hold_every_rule_doctor_checks(template: dict[str, Any]) -> None:
    """The template's defaults, as doctor would read them live, against the worker's
    default settings: a fresh deploy passes ``ferryman doctor``."""
    worker_defaults, retry_defaults = WorkerSettings(), RetrySettings()
    queue = QueueObserved(
        name="NAME-jobs",
        visibility_timeout_seconds=_default(template, "QueueVisibilityTimeout"),
        retention_seconds=template["Resources"]["JobQueue"]["Properties"]["MessageRetentionPeriod"],
        receive_wait_seconds=template["Resources"]["JobQueue"]["Properties"][
            "ReceiveMessageWaitTimeSeconds"
        ],
        max_receive_count=_default(template, "MaxReceiveCount"),
        dlq_arn="arn:aws:sqs:us-east-1:123456789012:NAME-jobs-dlq",
        dlq_retention_seconds=template["Resources"]["DeadLetterQueue"]["Properties"][
            "MessageRetentionPeriod"
        ],
    )
    mapping = MappingObserved(
        function_name="NAME-worker",
        function_timeout_seconds=_default(template, "FunctionTimeout"),
        batch_size=_default(template, "BatchSize"),
        batching_window_seconds=_default(template, "BatchingWindowSeconds"),
        report_batch_item_failures=True,
        maximum_concurrency=_default(template, "MaximumConcurrency"),
        state="Enabled",
    )
    worker = WorkerTimeouts(
        attempt_timeout_seconds=worker_defaults.attempt_timeout_seconds,
        heartbeat_seconds=LeasePolicy(
            lease_seconds=worker_defaults.lease_seconds,
            visibility_timeout_seconds=worker_defaults.visibility_timeout_seconds,
        ).heartbeat_seconds,
        visibility_timeout_seconds=worker_defaults.visibility_timeout_seconds,
        max_receives=retry_defaults.max_receives,
        concurrency=worker_defaults.concurrency,
        handler_margin_seconds=sum(PERSIST_RETRY_DELAYS_SECONDS) + TIMEOUT_MARGIN_SECONDS,
    )
    assert [f.rule for f in findings(queue, [mapping], worker) if not f.ok or f.note] == []


def test_the_event_source_reports_batch_item_failures(template: dict[str, Any]) -> None:
    events = template["Resources"]["WorkerFunction"]["Properties"]["Events"]
    (source,) = events.values()
    assert source["Type"] == "SQS"
    assert source["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert source["Properties"]["ScalingConfig"] == {
        "MaximumConcurrency": {"Ref": "MaximumConcurrency"}
    }


def _statements(template: dict[str, Any], role: str) -> list[dict[str, Any]]:
    policies = template["Resources"][role]["Properties"]["Policies"]
    return [s for p in policies for s in p["PolicyDocument"]["Statement"]]


@pytest.mark.parametrize("role", ["WorkerRole", "ApiTaskRole", "SweeperRole"])
def test_each_role_names_its_resources_and_actions(template: dict[str, Any], role: str) -> None:
    for statement in _statements(template, role):
        assert statement["Effect"] == "Allow"
        resources = statement["Resource"]
        for resource in resources if isinstance(resources, list) else [resources]:
            assert resource != "*", statement["Sid"]
        actions = statement["Action"]
        for action in actions if isinstance(actions, list) else [actions]:
            assert "*" not in action, statement["Sid"]
            assert action != "dynamodb:Scan"


def test_the_api_reads_results_and_never_writes_them(template: dict[str, Any]) -> None:
    results = [s for s in _statements(template, "ApiTaskRole") if s["Sid"] == "Results"]
    assert [s["Action"] for s in results] == ["s3:GetObject"]
    queue = next(s for s in _statements(template, "ApiTaskRole") if s["Sid"] == "JobQueue")
    assert "sqs:ReceiveMessage" not in queue["Action"]
    assert "sqs:DeleteMessage" not in queue["Action"]


def _actions(statement: dict[str, Any]) -> set[str]:
    actions = statement["Action"]
    return set(actions if isinstance(actions, list) else [actions])


def test_the_sweeper_touches_only_what_a_sweep_does(template: dict[str, Any]) -> None:
    statements = {s["Sid"]: s for s in _statements(template, "SweeperRole")}
    # It sends a job's message again; it receives and deletes dead letters only.
    assert statements["JobQueue"]["Resource"] == {"Fn::GetAtt": ["JobQueue", "Arn"]}
    assert not _actions(statements["JobQueue"]) & {"sqs:ReceiveMessage", "sqs:DeleteMessage"}
    assert "sqs:SendMessage" in _actions(statements["JobQueue"])
    assert statements["DeadLetterQueue"]["Resource"] == {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage"} <= _actions(statements["DeadLetterQueue"])
    assert "sqs:SendMessage" not in _actions(statements["DeadLetterQueue"])
    # Results: it lists and deletes under the prefix (retention), and reads or writes none.
    s3_actions = {a for s in statements.values() for a in _actions(s) if a.startswith("s3:")}
    assert s3_actions == {"s3:ListBucket", "s3:DeleteObject"}
    assert statements["ResultsList"]["Condition"] == {
        "StringLike": {"s3:prefix": ["results/", "results/*"]}
    }
    assert statements["ResultsDelete"]["Resource"] == {"Fn::Sub": "${ResultsBucket.Arn}/results/*"}


def test_the_sweeper_runs_every_minute_one_at_a_time(template: dict[str, Any]) -> None:
    function = template["Resources"]["SweeperFunction"]["Properties"]
    module, name = function["Handler"].rsplit(".", 1)
    assert callable(getattr(importlib.import_module(module), name))
    ((event),) = function["Events"].values()
    assert event == {
        "Type": "Schedule",
        "Properties": {"Schedule": "rate(1 minute)", "Description": "ferryman's sweeper rounds"},
    }
    assert function["ReservedConcurrentExecutions"] == 1
    assert function["EventInvokeConfig"]["MaximumRetryAttempts"] == 0
    interval = float(function["Environment"]["Variables"]["FERRYMAN_SWEEP_INTERVAL_SECONDS"])
    # Time for rounds beyond the margin, and none started once the next minute's
    # invocation is due.
    assert function["Timeout"] > SWEEP_MARGIN_SECONDS + interval
    assert function["Timeout"] - SWEEP_MARGIN_SECONDS <= 60
    # It sweeps the stack's own table, queues and results, as the worker works on them.
    worker = template["Resources"]["WorkerFunction"]["Properties"]["Environment"]["Variables"]
    sweeper = function["Environment"]["Variables"]
    for setting in ("FERRYMAN_DATABASE_URL", "FERRYMAN_RESULTS_URL", "FERRYMAN_MAX_RECEIVES"):
        assert sweeper[setting] == worker[setting]


def test_the_bucket_blocks_every_public_access(template: dict[str, Any]) -> None:
    bucket = template["Resources"]["ResultsBucket"]["Properties"]
    assert set(bucket["PublicAccessBlockConfiguration"].values()) == {True}
    assert len(bucket["PublicAccessBlockConfiguration"]) == 4
    assert bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]


def test_the_outputs_name_the_api_queue_table_and_bucket(template: dict[str, Any]) -> None:
    assert {"ApiUrl", "QueueUrl", "TableName", "BucketName", "SweeperFunctionName"} <= set(
        template["Outputs"]
    )
