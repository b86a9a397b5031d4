"""The suite's own rule: a missing service skips locally and fails under CI."""

from __future__ import annotations

import pytest

from .conftest import ENGINES


def test_a_missing_service_skips_locally(monkeypatch, require_service):
    monkeypatch.delenv("CI", raising=False)

    with pytest.raises(pytest.skip.Exception, match="postgres"):
        require_service("postgres", "no server on localhost:5432")


def test_a_missing_service_fails_under_ci(monkeypatch, require_service):
    monkeypatch.setenv("CI", "true")

    with pytest.raises(pytest.fail.Exception, match="no server"):
        require_service("postgres", "no server on localhost:5432")


def test_the_memory_sqlite_and_postgres_engines_are_registered():
    assert {"memory", "sqlite", "postgres"} <= set(ENGINES)


# Which optional capability each engine has. The capability tests skip an engine
# without one (test_claim_on_receive.py, test_publish_with_result.py); this pins the
# list, so an engine that lost a capability fails here instead of skipping there.
CAPABILITIES = {
    "memory": (False, False),
    "memory-outbox": (False, False),
    "sqlite": (True, False),
    "postgres": (False, True),
    "aws": (False, False),
}


async def test_each_engine_has_the_optional_capabilities_it_is_known_for(engine):
    from ferryman.ports.queue import ClaimsOnReceive
    from ferryman.ports.results import StagesResults
    from ferryman.ports.store import PublishesWithResult

    claims = isinstance(engine.queue, ClaimsOnReceive) and engine.queue.claims_on_receive
    publishes = isinstance(engine.port, PublishesWithResult) and isinstance(
        engine.results, StagesResults
    )
    assert (claims, publishes) == CAPABILITIES[engine.name]
