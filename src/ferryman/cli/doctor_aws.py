"""``ferryman doctor`` on an ``aws://`` URL: the live queue, its DLQ and its Lambda consumers.

The rules are adapters/aws/timeouts.py's; this module reads the live setup
(adapters/aws/live.py), gives the rules the worker's settings, and turns each finding
into one of the doctor's checks. It is reached by the URL's scheme before anything
opens an engine, so it works whether or not the engine registry serves ``aws://``.
It only looks: nothing is created or changed.
"""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING

from ferryman.core.errors import StoreUnavailableError

if TYPE_CHECKING:
    from ferryman.adapters.aws.timeouts import Finding, WorkerTimeouts
    from ferryman.cli.doctor import Check
    from ferryman.config import Settings

AWS_SCHEME = "aws"


def is_aws_url(url: str) -> bool:
    return urllib.parse.urlsplit(url).scheme == AWS_SCHEME


def worker_timeouts(settings: Settings) -> WorkerTimeouts:
    """The settings the AWS rules compare the live setup with."""
    from ferryman.adapters.aws.timeouts import WorkerTimeouts
    from ferryman.aws_lambda.batch import TIMEOUT_MARGIN_SECONDS, worst_case_attempt_seconds
    from ferryman.wiring import worker_timeouts as attempt_timeouts_of

    timeouts = attempt_timeouts_of(settings)
    return WorkerTimeouts(
        attempt_timeout_seconds=timeouts.attempt_timeout_seconds,
        handler_margin_seconds=worst_case_attempt_seconds(timeouts)
        - timeouts.attempt_timeout_seconds
        + TIMEOUT_MARGIN_SECONDS,
        heartbeat_seconds=settings.heartbeat_seconds,
        visibility_timeout_seconds=settings.worker.visibility_timeout_seconds,
        max_receives=settings.retries.max_receives,
        concurrency=settings.worker.concurrency,
    )


def as_check(finding: Finding) -> Check:
    from ferryman.cli.doctor import Check

    return Check(
        rule=finding.rule, value=finding.value, ok=finding.ok, fix=finding.fix, warning=finding.note
    )


def _failed(rule: str, value: str, fix: str) -> Check:
    from ferryman.cli.doctor import Check

    return Check(rule=rule, value=value, ok=False, fix=fix)


async def check_aws_live(settings: Settings, *, function_name: str | None) -> list[Check]:
    """The aws:// URL's queue, DLQ and Lambda mappings against every timeout rule.

    ``function_name`` names the Lambda worker; None finds every mapping on the queue
    (a deployment whose workers are containers has none, and its Lambda rules are not
    listed)."""
    from ferryman.adapters.aws.clients import open_clients
    from ferryman.adapters.aws.live import QueueNotFoundError, read_live, read_table_status
    from ferryman.adapters.aws.location import AwsUrlError, parse_aws_url
    from ferryman.adapters.aws.timeouts import findings

    url = settings.database_url
    try:
        location = parse_aws_url(url)
    except AwsUrlError as exc:
        return [_failed("aws:// URL valid", url, str(exc))]
    migrate = f"`ferryman migrate` on {url} creates it"
    try:
        async with open_clients(max_pool_connections=4) as clients:
            table_status = await read_table_status(clients, location.table)
            live = await read_live(clients, location, function_name=function_name)
    except QueueNotFoundError as exc:
        return [_failed("job queue exists", location.queue.name, f"{exc}: {migrate}")]
    except StoreUnavailableError as exc:
        return [_failed("AWS reachable", location.shown(), exc.message)]
    checks = [
        _table_check(location.table, table_status, migrate),
        *(
            _failed("found", what, "check the name, the region and the account")
            for what in live.missing
        ),
        *(as_check(f) for f in findings(live.queue, live.mappings, worker_timeouts(settings))),
    ]
    if not live.mappings and function_name is None:
        checks.append(_no_lambda_noted(location.queue.name))
    return checks


def _table_check(table: str, status: str | None, migrate: str) -> Check:
    from ferryman.cli.doctor import Check

    if status is None:
        return _failed("table exists", table, f"no table {table}: {migrate}")
    return Check(
        rule="table active",
        value=f"{table} {status}",
        ok=status in {"ACTIVE", "UPDATING"},
        fix=""
        if status in {"ACTIVE", "UPDATING"}
        else f"the table is {status}: wait, or recreate it",
    )


def _no_lambda_noted(queue: str) -> Check:
    from ferryman.cli.doctor import Check

    return Check(
        rule="Lambda event source mapping",
        value=f"none on {queue}",
        ok=True,
        warning=True,
        fix="no Lambda consumes the queue, so the Lambda rules are not checked (container "
        "workers need none); `ferryman doctor --function NAME` names the one expected",
    )
