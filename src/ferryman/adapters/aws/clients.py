"""The engine's AWS clients: aiobotocore, one per service, opened and closed together.

Every AWS call the engine makes is awaited on the event loop through aiobotocore (the
asyncio port of botocore): no thread is held while SQS long-polls for 20 s, and none
is blocked on the loop (docs/design-notes.md, "The AWS engine's SDK"). Region,
credentials and endpoint come from the standard AWS configuration chain exactly as
boto3 reads it (AWS_REGION / AWS_DEFAULT_REGION, AWS_PROFILE, AWS_ENDPOINT_URL and
its per-service forms, instance and task roles): nothing ferryman-specific.
"""

from __future__ import annotations

import os
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ferryman.core.errors import StoreUnavailableError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator

# SQS long polls hold a request for up to 20 s: the read timeout is above that.
READ_TIMEOUT_SECONDS = 30.0
CONNECT_TIMEOUT_SECONDS = 5.0
# Retries are botocore's "standard" mode: throttles and 5xx with jittered backoff,
# bounded. A call that still fails is an outage to the caller (StoreUnavailableError).
MAX_ATTEMPTS = 4
DEFAULT_MAX_POOL_CONNECTIONS = 64

SERVICES = ("dynamodb", "sqs", "s3")

# botocore event handlers every client opened from now on gets (bench/aws_requests.py
# counts billable requests with them, from the SDK's own events). Empty in a service.
_HOOKS: list[tuple[str, Callable[..., Any]]] = []


@contextmanager
def request_hooks(*hooks: tuple[str, Callable[..., Any]]) -> Iterator[None]:
    """Register botocore event handlers on every client opened inside the block, so a
    tool sees the calls of an engine it opens through the registry like any process."""
    _HOOKS.extend(hooks)
    try:
        yield
    finally:
        for hook in hooks:
            _HOOKS.remove(hook)


class AwsConfigurationError(StoreUnavailableError):
    """The AWS configuration chain gives no region (or no credentials) to call with."""


@dataclass(slots=True)
class AwsClients:
    """One aiobotocore client per service. Typed Any: the clients are made at run time
    from botocore's service models; each adapter wraps the calls it makes."""

    dynamodb: Any
    sqs: Any
    s3: Any
    region: str
    # Handlers registered on every client's events (bench/aws_requests.py counts
    # requests with them); kept so a caller can see what is registered.
    handlers: list[tuple[str, Callable[..., Any]]] = field(default_factory=list)

    def on(self, event: str, handler: Callable[..., Any]) -> None:
        """Register ``handler`` for a botocore event (``"after-call"``, ...) on every client."""
        for client in (self.dynamodb, self.sqs, self.s3):
            client.meta.events.register(event, handler)
        self.handlers.append((event, handler))


def _config(max_pool_connections: int) -> Any:
    from aiobotocore.config import AioConfig

    return AioConfig(
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        read_timeout=READ_TIMEOUT_SECONDS,
        retries={"mode": "standard", "max_attempts": MAX_ATTEMPTS},
        max_pool_connections=max_pool_connections,
    )


def configured_region() -> str:
    """The region the AWS configuration chain names; AwsConfigurationError when none."""
    from aiobotocore.session import get_session

    # botocore reads AWS_DEFAULT_REGION (and the profile's region); AWS_REGION is what
    # Lambda, ECS and the other SDKs set, so it is read too, after them.
    region = get_session().get_config_variable("region") or os.environ.get("AWS_REGION")
    if not region:
        raise AwsConfigurationError(
            "aws: no region is configured: set AWS_REGION (or AWS_DEFAULT_REGION, or a "
            "region in the AWS_PROFILE's config)"
        )
    return str(region)


# botocore's loader, which reads and keeps the service models (a few MB of JSON): one
# per process, so opening clients again (a test, the sweeper function's next open)
# does not parse them again. A session itself stays new each time: it reads the
# configuration chain (region, credentials, endpoint) as it is now.
_LOADER: Any = None


def _session() -> Any:
    from aiobotocore.session import get_session

    global _LOADER
    session = get_session()
    if _LOADER is None:
        _LOADER = session.get_component("data_loader")
    else:
        session.register_component("data_loader", _LOADER)
    return session


@asynccontextmanager
async def open_clients(
    *, max_pool_connections: int = DEFAULT_MAX_POOL_CONNECTIONS
) -> AsyncIterator[AwsClients]:
    """The engine's clients, closed (their connection pools too) on exit."""

    region = configured_region()
    session = _session()
    config = _config(max_pool_connections)
    async with AsyncExitStack() as stack:
        made = [
            await stack.enter_async_context(
                session.create_client(service, region_name=region, config=config)
            )
            for service in SERVICES
        ]
        clients = AwsClients(dynamodb=made[0], sqs=made[1], s3=made[2], region=region)
        for event, handler in _HOOKS:
            clients.on(event, handler)
        yield clients
