"""JobQueue fairness: tenants share receives, within a receiver's budget (issue 5, item 4).

Every engine that says its receive is fair by itself (QueueCapabilities.fair_receive:
all but aws) takes visible messages round-robin across tenants, the tenant holding
fewest first, each tenant's in the order they became visible; every engine gives a
tenant no more than the receiver's TenantBudget allows.
"""

from __future__ import annotations

import collections

import pytest

from contract.conftest import ENGINES
from ferryman.core.ids import new_job_id
from ferryman.ports.queue import QueueMessage, TenantBudget

pytestmark = pytest.mark.timeout(30)


# Engines whose receive is fair only by the receiver's cap (held for every engine in
# test_capabilities.py), left out of this module by name, on purpose. aws: SQS delivers
# in its own order (fair queues order by MessageGroupId on AWS, not on the emulator).
NOT_FAIR_BY_ITSELF = {"aws": "SQS delivers in its own order"}


@pytest.fixture(params=[name for name in ENGINES if name not in NOT_FAIR_BY_ITSELF])
async def engine(request, tmp_path, clock):
    """Each case here holds an engine to a fair receive, which every engine of the suite
    but those left out above states. An engine that states otherwise fails here until it
    is left out by name: it never silently passes."""
    async with ENGINES[request.param](request, tmp_path, clock) as built:
        assert built.queue.capabilities.fair_receive, (
            f"{built.name} says its receive is not fair by itself: leave it out of this module"
        )
        yield built


def test_each_engine_left_out_says_its_receive_is_not_fair_by_itself():
    """Left out only while it says so: an engine that became fair comes back in."""
    assert set(NOT_FAIR_BY_ITSELF) <= set(ENGINES)
    from contract.test_capabilities import STATED

    for name in NOT_FAIR_BY_ITSELF:
        assert STATED[name][1] is False


async def _send(engine, tenant_id: str, count: int = 1) -> list[str]:
    job_ids = []
    for _ in range(count):
        message = QueueMessage(job_id=new_job_id(), tenant_id=tenant_id)
        await engine.queue.send(message)
        job_ids.append(message.job_id)
        engine.advance(0.001)  # each becomes visible a little later than the last
    return job_ids


async def _receive(engine, max_messages, budget=None):
    return await engine.queue.receive(
        max_messages=max_messages, visibility_timeout_seconds=60.0, budget=budget
    )


async def test_a_flood_does_not_keep_another_tenants_fresh_work_waiting(engine):
    await _send(engine, "flood", 90)
    quick = await _send(engine, "quick", 2)

    deliveries = await _receive(engine, 4)

    tenants = [d.message.tenant_id for d in deliveries]
    assert collections.Counter(tenants) == {"flood": 2, "quick": 2}
    assert {d.message.job_id for d in deliveries if d.message.tenant_id == "quick"} == set(quick)


async def test_a_budget_bounds_what_one_tenant_may_hold(engine):
    await _send(engine, "a", 10)
    held = collections.Counter({"a": 3})
    budget = TenantBudget(max_per_tenant=4, in_flight=held)

    first = await _receive(engine, 10, budget)
    assert [d.message.tenant_id for d in first] == ["a"]  # 3 held + 1 = the cap

    held["a"] = 4
    assert await _receive(engine, 10, budget) == []  # at the cap: none, though 9 wait
    held["a"] = 1
    assert len(await _receive(engine, 10, budget)) == 3  # room again, read live


async def test_free_slots_go_to_the_tenant_holding_fewest(engine):
    await _send(engine, "big", 5)
    await _send(engine, "small", 5)
    budget = TenantBudget(max_per_tenant=100, in_flight=collections.Counter({"big": 3}))

    deliveries = await _receive(engine, 4, budget)

    # "small" holds none: it gets slots until it holds as many as "big" (3), then they alternate.
    assert [d.message.tenant_id for d in deliveries] == ["small", "small", "small", "big"]


async def test_a_retry_that_comes_due_waits_behind_work_already_waiting(engine):
    [retried] = await _send(engine, "t1")
    [delivery] = await _receive(engine, 1)
    # The retry's message is hidden for 10 s (as the worker does with RETRY_SCHEDULED).
    await engine.queue.change_visibility(delivery.receipt, timeout_seconds=10)
    fresh = await _send(engine, "t1", 3)
    engine.advance(11)

    order = [d.message.job_id for d in await _receive(engine, 4)]

    assert order == [*fresh, retried]
