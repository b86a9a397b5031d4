"""The AWS emulator the AWS engine's suites run against: moto in server mode.

The session starts ``moto.server`` once, on a free port of 127.0.0.1, as its own
process; tests reach it through the real SDK over HTTP, exactly as the engine reaches
AWS, with AWS_ENDPOINT_URL pointing at it and throwaway credentials. Each test that
needs AWS resources makes its own (a fresh NAME), so tests never see each other's.

Where moto differs from AWS in a way that matters (docs/aws.md, "What the emulator
cannot show"): visibility timeouts run on the emulator's wall clock (no fake clock
reaches it), TTL never deletes, and a standard queue ignores MessageGroupId (no fair
queue), so the suites test what ferryman relies on, not what the emulator lacks.

One difference is mended here rather than worked around: moto applies a DynamoDB
transaction item by item and undoes a cancelled one by restoring a copy of the whole
table, so two requests in its threads at once can both pass conditions that DynamoDB
would serialize, and one's rollback can erase the other's committed write. The
engine's atomicity (the last admin key, a probe taken once, a lease never granted
twice) rests on DynamoDB's serializability, so the server is started through
``serve_serialized`` below: DynamoDB requests are taken one at a time (as DynamoDB's
own isolation makes them appear), every other service stays concurrent (SQS long
polls must not hold DynamoDB up).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import AsyncExitStack, contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Coroutine, Iterator

REGION = "us-east-1"


def aws_environment(endpoint: str) -> dict[str, str]:
    """The AWS configuration chain's settings that point the SDK at the emulator."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        # Never a profile or an instance role from the machine running the tests.
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def fresh_name(prefix: str = "fm") -> str:
    """A NAME no other test uses: its table, queues and bucket are this test's own."""
    return f"{prefix}-{secrets.token_hex(5)}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
            return True
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def moto_server() -> Iterator[str]:
    """Start moto's server on 127.0.0.1; its endpoint URL until the block ends."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, __file__, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not _answers(endpoint):
            if process.poll() is not None:
                raise RuntimeError(f"moto's server exited with {process.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError("moto's server did not answer within 60 s")
            time.sleep(0.05)
        yield endpoint
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Provisioner:
    """Makes each test's table and queues (``provision``, as ``ferryman migrate`` does)
    through one set of clients kept for the session, on an event loop of its own in a
    thread: a test's loop ends with the test, and opening the engine's three clients
    again for every test cost about 75 ms of CPU, some 20 s over the suite."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._stack = AsyncExitStack()
        self._clients: Any = None

    def open(self) -> None:
        """Open the clients: the AWS configuration chain must point at the emulator."""
        from ferryman.adapters.aws.clients import open_clients

        async def enter() -> Any:
            return await self._stack.enter_async_context(open_clients())

        self._clients = self._run(enter())

    async def provision(self, url: str, *, max_receives: int) -> None:
        """Make ``url``'s table and queues; awaited on the caller's loop."""
        from ferryman.adapters.aws.location import parse_aws_url
        from ferryman.adapters.aws.provision import provision

        made = provision(self._clients, parse_aws_url(url), max_receives=max_receives)
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(made, self._loop))

    def close(self) -> None:
        try:
            self._run(self._stack.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()

    def _run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=60)


def serve_serialized(argv: list[str]) -> None:
    """Run ``moto.server`` with its DynamoDB requests taken one at a time."""
    import threading

    from moto import server
    from moto.dynamodb.responses import DynamoHandler

    one_at_a_time = threading.Lock()
    call_action = DynamoHandler.call_action

    def serialized(self: DynamoHandler) -> object:
        with one_at_a_time:
            return call_action(self)

    DynamoHandler.call_action = serialized  # type: ignore[method-assign]
    _roll_back_only_what_a_transaction_touched()
    server.main(argv)


def _roll_back_only_what_a_transaction_touched() -> None:
    """moto keeps a transaction's undo as a deep copy of the whole table, taken once per
    item of the transaction: a cost that grows with the table, seconds per transaction
    once a suite has written a few thousand items (the chaos run never finished). With
    requests taken one at a time, the undo needs only the items the transaction names:
    each is kept before, and put back if moto cancels the transaction. What is written,
    and every condition's outcome, is moto's own."""
    import copy as real_copy
    import types

    from moto.dynamodb import models
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    def deepcopy(value: object, memo: object = None) -> object:
        # The whole-table copy: the table itself stands for its undo (see below).
        return value if isinstance(value, Table) else real_copy.deepcopy(value, memo)  # type: ignore[arg-type]

    models.copy = types.SimpleNamespace(deepcopy=deepcopy, copy=real_copy.copy)  # type: ignore[attr-defined]
    original = models.DynamoDBBackend.transact_write_items

    def touched(
        backend: object, transact_items: list[dict[str, object]]
    ) -> list[tuple[object, object, object, object]]:
        kept = []
        for entry in transact_items:
            ((_, op),) = entry.items()
            table = backend.get_table(op["TableName"])  # type: ignore[attr-defined, index]
            attributes = op["Item"] if "Item" in op else op["Key"]  # type: ignore[operator, index]
            hash_key = DynamoType(attributes[table.hash_key_attr])
            range_key = (
                DynamoType(attributes[table.range_key_attr]) if table.range_key_attr else None
            )
            before = table.get_item(hash_key, range_key)
            kept.append((table, hash_key, range_key, real_copy.deepcopy(before)))
        return kept

    def transact_write_items(self: object, transact_items: list[dict[str, object]]) -> None:
        try:
            kept = touched(self, transact_items)
        except Exception:  # noqa: BLE001 - a malformed request: moto says what is wrong
            kept = []
        try:
            original(self, transact_items)
        except Exception:
            for table, hash_key, range_key, before in reversed(kept):
                table.delete_item(hash_key, range_key)
                if before is not None:
                    if range_key is not None:
                        table.items[hash_key][range_key] = before
                    else:
                        table.items[hash_key] = before
            raise

    models.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]


if __name__ == "__main__":
    serve_serialized(sys.argv[1:])
