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

import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

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
    server.main(argv)


if __name__ == "__main__":
    serve_serialized(sys.argv[1:])
