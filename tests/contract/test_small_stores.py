"""ResultStore, ApiKeyStore and ControlStore."""

from __future__ import annotations

import pytest

from ferryman.ports.control import Switch
from ferryman.ports.keys import ApiKeyRecord

pytestmark = pytest.mark.timeout(30)


async def test_a_result_round_trips(result_store):
    data = b'{"answer": "caf\xc3\xa9"}\x00\xff'

    ref = await result_store.put("gen_1/att_1", data)
    other = await result_store.put("gen_1/att_2", b"second")

    assert isinstance(ref, str)
    assert ref != other
    assert await result_store.get(ref) == data
    assert await result_store.get(other) == b"second"


async def test_an_unknown_result_is_a_key_error(result_store):
    await result_store.put("gen_1/att_1", b"x")

    with pytest.raises(KeyError):
        await result_store.get("gen_1/att_9-never-stored")


async def test_engine_results_round_trip(engine):
    ref = await engine.results.put("gen_2/att_1", b"ok")

    assert await engine.results.get(ref) == b"ok"


async def test_api_keys_are_found_by_their_prefix(engine):
    record = ApiKeyRecord(
        key_id="fm_abc123", tenant_id="t1", secret_hash="ab" * 32, admin=True, created_at=1.5
    )
    other = ApiKeyRecord(
        key_id="fm_def456", tenant_id="t2", secret_hash="cd" * 32, admin=False, created_at=2.0
    )

    await engine.keys.add_key(record)
    await engine.keys.add_key(other)

    assert await engine.keys.find_key("fm_abc123") == record
    assert await engine.keys.find_key("fm_def456") == other
    assert await engine.keys.find_key("fm_unknown") is None


async def test_pause_switches(engine):
    assert await engine.control.paused() == frozenset()

    await engine.control.set_paused(Switch.INTAKE, True, actor="ops", now=engine.now())
    assert await engine.control.paused() == frozenset({Switch.INTAKE})
    await engine.control.set_paused(Switch.WORKERS, True, actor="ops", now=engine.now())
    await engine.control.set_paused(Switch.INTAKE, False, actor="ops", now=engine.now())

    assert await engine.control.paused() == frozenset({Switch.WORKERS})
