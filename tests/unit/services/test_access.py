"""ApiKeys: who may call, for how long, and how a key is named when revoked."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ferryman.core.clock import FakeClock
from ferryman.core.errors import (
    ApiKeyNotFoundError,
    AuthenticationError,
    InvalidRequestError,
    LastAdminKeyError,
)
from ferryman.engines import open_engine
from ferryman.ports.keys import RevokeOutcome
from ferryman.services.access import ApiKeys, KeyState, key_state


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def api_keys(clock: FakeClock) -> AsyncIterator[ApiKeys]:
    async with open_engine("memory://", clock=clock) as engine:
        yield ApiKeys(engine.keys, clock)


def secret_of(token: str) -> str:
    # fm_<key id>_<secret>: the secret itself may hold "_" (URL-safe base64).
    return token.split("_", 2)[2]


def wrong_secret(token: str) -> str:
    secret = secret_of(token)
    head = token.removesuffix(secret)
    return f"{head}{'A' if secret[0] != 'A' else 'B'}{secret[1:]}"


async def test_a_key_works_until_it_expires(api_keys: ApiKeys, clock: FakeClock) -> None:
    issued = await api_keys.issue("acme", expires_at=clock.now() + 60)
    assert (await api_keys.authenticate(issued.token)).tenant_id == "acme"

    clock.advance(60)  # the expiry instant itself is already too late

    with pytest.raises(AuthenticationError) as caught:
        await api_keys.authenticate(issued.token)
    assert caught.value.message == AuthenticationError().message
    assert key_state(issued.record, clock.now()) is KeyState.EXPIRED


@pytest.mark.parametrize("offset", [0.0, -1.0, 101 * 365 * 86_400, float("inf"), float("nan")])
async def test_an_expiry_must_be_a_future_moment_within_a_century(
    api_keys: ApiKeys, clock: FakeClock, offset: float
) -> None:
    with pytest.raises(InvalidRequestError):
        await api_keys.issue("acme", expires_at=clock.now() + offset)
    assert await api_keys.list_keys() == []


@pytest.mark.parametrize("name", ["by id", "by fm_ id", "by the whole key", "padded"])
async def test_a_key_is_revoked_by_its_id_or_by_itself(api_keys: ApiKeys, name: str) -> None:
    issued = await api_keys.issue("acme")
    reference = {
        "by id": issued.record.key_id,
        "by fm_ id": f"fm_{issued.record.key_id}",
        "by the whole key": issued.token,
        "padded": f"  {issued.record.key_id}\n",
    }[name]

    revocation = await api_keys.revoke(reference, actor="cli:alice")

    assert revocation.outcome is RevokeOutcome.REVOKED
    with pytest.raises(AuthenticationError):
        await api_keys.authenticate(issued.token)


async def test_a_whole_key_with_a_wrong_secret_revokes_nothing(api_keys: ApiKeys) -> None:
    issued = await api_keys.issue("acme")
    guess = wrong_secret(issued.token)

    with pytest.raises(ApiKeyNotFoundError) as caught:
        await api_keys.revoke(guess, actor="cli:mallory")

    assert secret_of(guess) not in caught.value.message
    assert (await api_keys.authenticate(issued.token)).tenant_id == "acme"


@pytest.mark.parametrize("reference", ["", "0123456789ab", "fm_0123456789ab", "secret-ish-text"])
async def test_an_unknown_reference_is_not_found_and_never_echoed(
    api_keys: ApiKeys, reference: str
) -> None:
    await api_keys.issue("acme")
    with pytest.raises(ApiKeyNotFoundError) as caught:
        await api_keys.revoke(reference, actor="ops")
    if reference == "secret-ish-text":
        assert reference not in caught.value.message


async def test_the_last_admin_key_needs_an_explicit_override(api_keys: ApiKeys) -> None:
    admin = await api_keys.issue("ops", admin=True)

    with pytest.raises(LastAdminKeyError):
        await api_keys.revoke(admin.record.key_id, actor="ops")
    forced = await api_keys.revoke(admin.record.key_id, actor="ops", allow_last_admin=True)

    assert forced.outcome is RevokeOutcome.REVOKED
