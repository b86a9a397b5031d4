"""What the Lambda suites' deployments share: ``aws://NAME`` on the emulator, and the
raw SQS queue and DLQ behind it, each reached with clients of its own."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, TypeVar

from ferryman.adapters.aws.clients import open_clients
from ferryman.adapters.aws.location import parse_aws_url

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

T = TypeVar("T")


class QueuesOf:
    """A test's way to the deployment's queues; ``url`` is its ``aws://NAME``."""

    url: str

    @staticmethod
    def run(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run(coro)

    def _sqs(self, use: Callable[[Any, str], Awaitable[T]], *, dlq: bool = False) -> T:
        """``use(sqs client, queue url)`` with clients of its own."""
        location = parse_aws_url(self.url)

        async def go() -> T:
            async with open_clients() as clients:
                name = (location.dlq if dlq else location.queue).name
                url = (await clients.sqs.get_queue_url(QueueName=name))["QueueUrl"]
                return await use(clients.sqs, url)

        return self.run(go())
