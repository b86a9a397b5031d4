"""ResultStore: what every engine promises about stored results."""

from __future__ import annotations

import pytest

from ferryman.core.errors import ResultUnreadableError
from ferryman.core.results import job_id_of, result_key

pytestmark = pytest.mark.timeout(30)

KEY_1 = result_key("t1", "gen_01HZZZZZZZZZZZZZZZZZZZZZZ1", "att_01HZZZZZZZZZZZZZZZZZZZZZZ1")
KEY_2 = result_key("t1", "gen_01HZZZZZZZZZZZZZZZZZZZZZZ1", "att_01HZZZZZZZZZZZZZZZZZZZZZZ2")
OTHER_TENANT = result_key("t2", "gen_01HYYYYYYYYYYYYYYYYYYYYYY1", "att_01HYYYYYYYYYYYYYYYYYYYYYY1")


async def test_a_result_round_trips_under_its_key(result_store):
    data = b'{"answer": "caf\xc3\xa9"}\x00\xff'

    ref = await result_store.put(KEY_1, data)
    other = await result_store.put(KEY_2, b"second")

    assert isinstance(ref, str)
    assert ref != other
    assert await result_store.get(ref, key=KEY_1) == data
    assert await result_store.get(other, key=KEY_2) == b"second"


async def test_a_ref_read_as_another_key_is_unreadable_never_served(result_store):
    ref = await result_store.put(OTHER_TENANT, b'{"private": true}')

    with pytest.raises(ResultUnreadableError):
        await result_store.get(ref, key=KEY_1)


async def test_an_unknown_ref_is_unreadable(result_store):
    await result_store.put(KEY_1, b"x")

    with pytest.raises(ResultUnreadableError):
        await result_store.get("gen_1/att_9-never-stored", key=KEY_1)


async def test_a_healthy_store_passes_its_probe(result_store):
    await result_store.probe()
    await result_store.put(KEY_1, b"x")
    await result_store.probe()


async def test_reclaim_never_takes_a_result_whose_job_exists(result_store):
    kept = await result_store.put(KEY_1, b"kept")
    await result_store.put(OTHER_TENANT, b"gone")

    async def only_the_first_job_exists(job_ids) -> bool:
        return job_id_of(KEY_1) in job_ids

    reclaimed = await result_store.reclaim(any_job_exists=only_the_first_job_exists)

    assert reclaimed >= 0
    assert await result_store.get(kept, key=KEY_1) == b"kept"


async def test_engine_results_round_trip(engine):
    ref = await engine.results.put(KEY_1, b"ok")

    assert await engine.results.get(ref, key=KEY_1) == b"ok"
