"""ApiKeyStore: keys are listed without loss, revoked once, and the last admin key is kept."""

from __future__ import annotations

import asyncio

import pytest

from ferryman.core.errors import StateConflictError
from ferryman.ports.keys import ApiKeyRecord, RevokeOutcome

pytestmark = pytest.mark.timeout(30)


def key(key_id: str, *, tenant: str = "t1", admin: bool = False, **fields: float) -> ApiKeyRecord:
    return ApiKeyRecord(
        key_id=key_id,
        tenant_id=tenant,
        secret_hash="ab" * 32,
        admin=admin,
        created_at=fields.pop("created_at", 10.0),
        **fields,
    )


async def test_keys_round_trip_with_their_expiry(engine):
    record = key("aaaaaaaaaaaa", admin=True, expires_at=1_000.5)
    await engine.keys.add_key(record)
    assert await engine.keys.find_key("aaaaaaaaaaaa") == record


async def test_a_taken_key_id_is_a_conflict(engine):
    await engine.keys.add_key(key("aaaaaaaaaaaa"))
    with pytest.raises(StateConflictError):
        await engine.keys.add_key(key("aaaaaaaaaaaa", tenant="t2"))
    assert (await engine.keys.find_key("aaaaaaaaaaaa")).tenant_id == "t1"


async def test_lists_hold_every_key_oldest_first_and_filter_by_tenant(engine):
    await engine.keys.add_key(key("cccccccccccc", tenant="t2", created_at=3.0))
    await engine.keys.add_key(key("aaaaaaaaaaaa", tenant="t1", created_at=1.0))
    await engine.keys.add_key(key("bbbbbbbbbbbb", tenant="t1", created_at=2.0))
    await engine.keys.revoke_key("bbbbbbbbbbbb", actor="ops", now=5.0, keep_an_admin=True)

    everything = await engine.keys.list_keys()
    t1 = await engine.keys.list_keys(tenant_id="t1")

    assert [r.key_id for r in everything] == ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"]
    assert [r.key_id for r in t1] == ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    assert t1[1].revoked_at == 5.0
    assert await engine.keys.list_keys(tenant_id="nobody") == []


async def test_a_revocation_records_who_and_when_and_a_second_one_changes_nothing(engine):
    await engine.keys.add_key(key("aaaaaaaaaaaa"))

    first = await engine.keys.revoke_key(
        "aaaaaaaaaaaa", actor="alice", now=20.0, keep_an_admin=True
    )
    again = await engine.keys.revoke_key("aaaaaaaaaaaa", actor="bob", now=30.0, keep_an_admin=True)

    assert first.outcome is RevokeOutcome.REVOKED
    assert (first.record.revoked_at, first.record.revoked_by) == (20.0, "alice")
    assert again.outcome is RevokeOutcome.ALREADY_REVOKED
    assert again.record == first.record
    assert await engine.keys.find_key("aaaaaaaaaaaa") == first.record


async def test_an_unknown_key_is_not_found(engine):
    revocation = await engine.keys.revoke_key(
        "aaaaaaaaaaaa", actor="ops", now=1.0, keep_an_admin=True
    )
    assert revocation.outcome is RevokeOutcome.NOT_FOUND
    assert revocation.record is None


async def test_the_last_usable_admin_key_is_kept_when_asked(engine):
    await engine.keys.add_key(key("aaaaaaaaaaaa", admin=True))
    # Neither an expired nor a revoked admin key, nor a tenant key, can stand in for it.
    await engine.keys.add_key(key("bbbbbbbbbbbb", admin=True, expires_at=50.0))
    await engine.keys.add_key(key("cccccccccccc", admin=True))
    await engine.keys.revoke_key("cccccccccccc", actor="ops", now=60.0, keep_an_admin=False)
    await engine.keys.add_key(key("dddddddddddd"))

    kept = await engine.keys.revoke_key("aaaaaaaaaaaa", actor="ops", now=100.0, keep_an_admin=True)

    assert kept.outcome is RevokeOutcome.LAST_ADMIN
    assert (await engine.keys.find_key("aaaaaaaaaaaa")).revoked_at is None


async def test_an_admin_key_goes_when_another_usable_one_remains_or_when_forced(engine):
    await engine.keys.add_key(key("aaaaaaaaaaaa", admin=True))
    await engine.keys.add_key(key("bbbbbbbbbbbb", admin=True, expires_at=500.0))

    first = await engine.keys.revoke_key("aaaaaaaaaaaa", actor="ops", now=100.0, keep_an_admin=True)
    last = await engine.keys.revoke_key("bbbbbbbbbbbb", actor="ops", now=100.0, keep_an_admin=True)
    forced = await engine.keys.revoke_key(
        "bbbbbbbbbbbb", actor="ops", now=100.0, keep_an_admin=False
    )

    assert first.outcome is RevokeOutcome.REVOKED
    assert last.outcome is RevokeOutcome.LAST_ADMIN
    assert forced.outcome is RevokeOutcome.REVOKED


async def test_tenant_keys_and_expired_admin_keys_are_never_held_back(engine):
    await engine.keys.add_key(key("aaaaaaaaaaaa"))
    await engine.keys.add_key(key("bbbbbbbbbbbb", admin=True, expires_at=50.0))

    tenant = await engine.keys.revoke_key(
        "aaaaaaaaaaaa", actor="ops", now=100.0, keep_an_admin=True
    )
    expired = await engine.keys.revoke_key(
        "bbbbbbbbbbbb", actor="ops", now=100.0, keep_an_admin=True
    )

    assert tenant.outcome is RevokeOutcome.REVOKED
    assert expired.outcome is RevokeOutcome.REVOKED


async def test_revoking_the_last_two_admin_keys_at_once_keeps_one(engine):
    await engine.keys.add_key(key("aaaaaaaaaaaa", admin=True))
    await engine.keys.add_key(key("bbbbbbbbbbbb", admin=True))

    outcomes = await asyncio.gather(
        *(
            engine.keys.revoke_key(key_id, actor="ops", now=100.0, keep_an_admin=True)
            for key_id in ("aaaaaaaaaaaa", "bbbbbbbbbbbb")
        )
    )

    assert sorted(r.outcome for r in outcomes) == [RevokeOutcome.LAST_ADMIN, RevokeOutcome.REVOKED]
