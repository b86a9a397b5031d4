"""ApiKeyStore and ControlStore (the ResultStore has test_result_store.py)."""

from __future__ import annotations

import pytest

from ferryman.ports.control import Switch
from ferryman.ports.keys import ApiKeyRecord

pytestmark = pytest.mark.timeout(30)


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
