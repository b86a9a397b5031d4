"""Rules every suite shares.

A suite that needs an outside service (PostgreSQL, an AWS emulator) asks for it with
the ``require_service`` fixture, so the rule is written once: locally a missing
service skips the test with its reason; under CI=true (which .ci/run sets) it fails,
so CI can never pass by skipping a backend.
"""

from __future__ import annotations

import os
import sqlite3
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from aws_emulator import Provisioner


def _require_service(name: str, reason: str) -> NoReturn:
    message = f"{name} is not available: {reason}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def require_service() -> Callable[[str, str], NoReturn]:
    """Skip (locally) or fail (under CI=true) a test whose service is missing."""
    return _require_service


def _sqlite_outage(message: str, code: int) -> sqlite3.OperationalError:
    error = sqlite3.OperationalError(message)
    error.sqlite_errorcode = code
    return error


@pytest.fixture(scope="session")
def sqlite_outage() -> Callable[[str, int], sqlite3.OperationalError]:
    """An error as SQLite raises it for an outage: its result code (``sqlite3.SQLITE_FULL``,
    ``SQLITE_BUSY``, ``SQLITE_IOERR``, ...) is what makes the engine call it one; an error
    without one is a wrong statement, which goes through as itself."""
    return _sqlite_outage


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``aws`` every test whose fixtures reach the AWS emulator. A case that asks
    for it only while it runs (the contract's aws engine and result stores, through
    ``request.getfixturevalue``) is marked where it is parametrised; ``aws_env`` fails
    one that is not, so no test reaches the emulator unmarked (the mutation sample's
    selection leaves these out: pyproject.toml, ``[tool.mutmut]``)."""
    for item in items:
        if "aws_endpoint" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.aws)


@pytest.fixture(scope="session")
def aws_endpoint(require_service: Callable[[str, str], NoReturn]) -> Iterator[str]:
    """moto's server, started once for the session on 127.0.0.1 (tests/aws_emulator.py).
    Requested only by the AWS cases, so the others never start it."""
    try:
        import aiobotocore  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError as exc:
        require_service("the AWS emulator", f"{exc} (pip install -e '.[server,test]')")
    from aws_emulator import moto_server

    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def aws_env(
    aws_endpoint: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> dict[str, str]:
    """The AWS configuration chain pointed at the emulator for this test (and returned,
    for a subprocess's environment). The one way to the emulator: it refuses a test
    not marked ``aws``."""
    from aws_emulator import aws_environment

    if request.node.get_closest_marker("aws") is None:
        pytest.fail(
            f"{request.node.nodeid} reaches the AWS emulator but is not marked aws: "
            "give its case pytest.param(..., marks=pytest.mark.aws)"
        )

    environment = aws_environment(aws_endpoint)
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    return environment


@pytest.fixture
def aws_retries_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore's retries, made one after another without their backoff.

    The engine's clients retry a failed call (botocore's "standard" mode, MAX_ATTEMPTS
    retries: adapters/aws/clients.py) after jittered waits of up to 1, 2, 4 and 8 s, so
    a test of what an outage becomes waited 7.5 s a call on average (9 to 19 s a test)
    for nothing it checks. Every attempt is still made, and the error the last one
    ends with is the one the engine translates."""
    from botocore.retries.standard import ExponentialBackoff

    monkeypatch.setattr(ExponentialBackoff, "delay_amount", lambda _self, _context: 0.0)


@pytest.fixture(scope="session")
def aws_provisioner(aws_endpoint: str) -> Iterator[Provisioner]:
    """What makes the tests' tables and queues: one set of clients for the session
    (tests/aws_emulator.py says why)."""
    from aws_emulator import Provisioner, aws_environment

    provisioner = Provisioner()
    try:
        with pytest.MonkeyPatch.context() as patch:
            for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
                patch.delenv(name, raising=False)
            for name, value in aws_environment(aws_endpoint).items():
                patch.setenv(name, value)
            provisioner.open()
        yield provisioner
    finally:
        provisioner.close()


@pytest.fixture
def aws_url_factory(
    aws_env: dict[str, str], aws_provisioner: Provisioner
) -> Callable[..., Awaitable[str]]:
    """Factory: ``await make(max_receives=10)`` is ``aws://NAME`` for a NAME of this
    test's own, its table and queues made as ``ferryman migrate`` makes them."""
    from aws_emulator import fresh_name

    async def make(*, max_receives: int = 10) -> str:
        url = f"aws://{fresh_name()}"
        await aws_provisioner.provision(url, max_receives=max_receives)
        return url

    return make


@pytest.fixture
async def aws_url(aws_url_factory: Callable[..., Awaitable[str]]) -> str:
    """``aws://NAME`` with its own table and queues (max receives 10, the contract's)."""
    return await aws_url_factory()
