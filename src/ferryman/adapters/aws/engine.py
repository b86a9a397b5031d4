"""The AWS engine's entry in the registry (engines.py): its URL, opener and prober.

``aws://NAME`` opens DynamoDB (jobs, keys, switches, audit, shared limits, results
kept "in the database", webhook signing secrets), SQS (the job queue and its dead-letter queue) over one set
of aiobotocore clients, closed together. Nothing is created here: ``ferryman
migrate`` makes the table and queues (adapters/aws/provision.py), so a process that
only serves never needs the rights to create them.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from ferryman.adapters.aws.location import AwsUrlError, parse_aws_url
from ferryman.engines import DatabaseProbe, Engine, InvalidUrlError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ferryman.core.clock import Clock
    from ferryman.engines import EngineOptions

# The table and queues carry no schema version of their own: provisioning is checked
# attribute by attribute (provision.check), so the probe reports version 1 once
# everything exists.
SCHEMA_VERSION = 1


def check_url(url: str) -> None:
    try:
        parse_aws_url(url)
    except AwsUrlError as exc:
        raise InvalidUrlError(str(exc)) from exc


@asynccontextmanager
async def open_engine(url: str, clock: Clock, options: EngineOptions) -> AsyncIterator[Engine]:
    from ferryman.adapters.aws.clients import open_clients
    from ferryman.adapters.aws.control import DynamoControlStore
    from ferryman.adapters.aws.keys import DynamoApiKeyStore
    from ferryman.adapters.aws.limits import DynamoSharedLimits
    from ferryman.adapters.aws.queue import SqsJobQueue
    from ferryman.adapters.aws.results_db import DynamoResultStore
    from ferryman.adapters.aws.store import DynamoJobStore
    from ferryman.adapters.aws.webhook_secrets import DynamoWebhookSecretStore

    location = parse_aws_url(url)
    async with open_clients() as clients:
        queue = await SqsJobQueue.open(
            clients, location, clock=clock, max_receives=options.max_receives
        )
        try:
            yield Engine(
                name="aws",
                location=location.shown(),
                store=DynamoJobStore(clients, location.table, clock=clock),
                queue=queue,
                keys=DynamoApiKeyStore(clients, location.table),
                control=DynamoControlStore(clients, location.table),
                results=DynamoResultStore(clients, location.table),
                webhook_secrets=DynamoWebhookSecretStore(clients, location.table),
                limits=DynamoSharedLimits(clients, location.table),
                database=clients,
            )
        finally:
            await queue.close()


async def probe_database(url: str) -> DatabaseProbe:
    """Whether the table and queues exist, creating nothing: what is missing is the
    error, naming ``ferryman migrate``. What exists but disagrees with the settings is
    for ``ferryman migrate`` and ``ferryman doctor`` to name: they know the settings
    (the redrive count to expect), a probe of the URL does not."""
    from ferryman.adapters.aws.clients import AwsConfigurationError, open_clients
    from ferryman.adapters.aws.errors import describe, is_outage
    from ferryman.adapters.aws.provision import check
    from ferryman.engines import EngineOptions

    location = parse_aws_url(url)
    shown = location.shown()
    try:
        async with open_clients(max_pool_connections=4) as clients:
            report = await check(clients, location, max_receives=EngineOptions().max_receives)
    except AwsConfigurationError as exc:
        return DatabaseProbe(
            path=shown, exists=False, latest_version=SCHEMA_VERSION, error=str(exc)
        )
    except Exception as exc:
        if not is_outage(exc):
            raise
        return DatabaseProbe(
            path=shown, exists=False, latest_version=SCHEMA_VERSION, error=describe(exc, "aws")
        )
    if report.missing:
        return DatabaseProbe(
            path=shown,
            exists=False,
            latest_version=SCHEMA_VERSION,
            error=f"aws: missing {', '.join(report.missing)} (run `ferryman migrate`)",
        )
    return DatabaseProbe(
        path=shown, exists=True, latest_version=SCHEMA_VERSION, schema_version=SCHEMA_VERSION
    )
