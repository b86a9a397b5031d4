"""What a per-tenant API budget shared through PostgreSQL costs a request.

Makes a scratch database on the server (``--server``, default the local one), then for
a few budgets (rate, burst) times ``--requests`` requests arriving at the budget's
rate, three ways: the in-process bucket every engine but PostgreSQL uses, the leased
budget (http/rate_lease.py: a batch of tokens per database round trip), and one lease
per request (what a shared bucket without batches would cost). Prints microseconds
per request; the scratch database is dropped at the end.

Run: ``.venv/bin/python bench/shared_limits.py [--requests 2000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import time
from typing import TYPE_CHECKING

import psycopg

from ferryman.core.clock import SystemClock
from ferryman.engines import EngineOptions, open_engine
from ferryman.http.rate_lease import LeasedBudgets, batch_size
from ferryman.http.rate_limit import Budget, Policy, TenantBudgets

if TYPE_CHECKING:
    from ferryman.ports.limits import SharedLimits

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
BUDGETS = ((10.0, 20), (100.0, 200), (1000.0, 2000))


async def _per_request_us(
    budgets: TenantBudgets | LeasedBudgets, tenant: str, rate: float, n: int
) -> float:
    started = time.perf_counter()
    for i in range(n):
        await budgets.acquire(Budget.SUBMIT, tenant, 1_000_000.0 + i / rate)
    return (time.perf_counter() - started) / n * 1e6


async def _unbatched_us(shared: SharedLimits, policy: Policy, n: int) -> float:
    started = time.perf_counter()
    for i in range(n):
        await shared.lease(
            f"unbatched:{policy.rate_per_second}",
            rate_per_second=policy.rate_per_second,
            burst=policy.burst,
            want=1,
            now=1_000_000.0 + i / policy.rate_per_second,
        )
    return (time.perf_counter() - started) / n * 1e6


async def main(server: str, requests: int) -> None:
    name = f"ferryman_bench_{secrets.token_hex(4)}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        url = f"{server.rsplit('/', 1)[0]}/{name}"
        options = EngineOptions(postgres_pool_max_size=4)
        async with open_engine(url, clock=SystemClock(), options=options) as engine:
            shared = engine.limits
            assert shared is not None  # PostgreSQL's limits are shared by every process
            for rate, burst in BUDGETS:
                policy = Policy(Budget.SUBMIT, rate, burst)
                local = await _per_request_us(
                    TenantBudgets({Budget.SUBMIT: policy}), "t", rate, requests
                )
                leased = await _per_request_us(
                    LeasedBudgets({Budget.SUBMIT: policy}, shared), f"t{rate}", rate, requests
                )
                unbatched = await _unbatched_us(shared, policy, min(requests, 500))
                print(
                    f"rate {rate:g}/s burst {burst} (batch {batch_size(policy)}): "
                    f"in-process {local:.1f} us/request, leased {leased:.1f} us/request, "
                    f"a lease per request {unbatched:.1f} us/request"
                )
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=DEFAULT_SERVER)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(main(args.server, args.requests))
