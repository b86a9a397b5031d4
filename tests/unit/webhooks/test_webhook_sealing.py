"""Signing secrets at rest: sealed under FERRYMAN_SECRET_KEY (with key rotation), plain
without one, unreadable under the wrong key, and a malformed key explained without
ever being quoted."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from ferryman.core.errors import WebhookSecretUnreadableError
from ferryman.webhooks.sealing import FernetSealer, PlainSealer, sealer_from_key
from ferryman.webhooks.signing import new_secret

KEY_A = Fernet.generate_key().decode()
KEY_B = Fernet.generate_key().decode()
SECRET = new_secret()


def test_with_a_key_secrets_are_sealed_and_open_again() -> None:
    sealer = sealer_from_key(KEY_A)
    assert isinstance(sealer, FernetSealer)
    sealed = sealer.seal(SECRET)
    assert sealed.startswith("fernet:")
    assert SECRET not in sealed and SECRET.removeprefix("whsec_") not in sealed
    assert sealer.open(sealed) == SECRET
    assert sealer.seal(SECRET) != sealed  # a fresh IV each time


def test_without_a_key_secrets_are_kept_plain() -> None:
    for value in (None, "", "  "):
        sealer = sealer_from_key(value)
        assert isinstance(sealer, PlainSealer)
        assert sealer.seal(SECRET) == f"plain:{SECRET}"
        assert sealer.open(f"plain:{SECRET}") == SECRET


def test_key_rotation_the_first_key_seals_and_every_key_opens() -> None:
    old = sealer_from_key(KEY_A).seal(SECRET)
    rotated = sealer_from_key(f"{KEY_B}, {KEY_A}")
    assert rotated.open(old) == SECRET
    new = rotated.seal(SECRET)
    assert sealer_from_key(KEY_B).open(new) == SECRET
    with pytest.raises(WebhookSecretUnreadableError):
        sealer_from_key(KEY_A).open(new)


def test_a_secret_sealed_under_another_key_or_no_key_is_unreadable() -> None:
    sealed = sealer_from_key(KEY_A).seal(SECRET)
    with pytest.raises(WebhookSecretUnreadableError):
        sealer_from_key(KEY_B).open(sealed)
    with pytest.raises(WebhookSecretUnreadableError) as caught:
        sealer_from_key(None).open(sealed)
    assert "FERRYMAN_SECRET_KEY" in caught.value.message
    assert caught.value.code == "webhook_secret_unreadable"


def test_plain_values_written_before_the_key_was_set_still_open() -> None:
    plain = sealer_from_key(None).seal(SECRET)
    assert sealer_from_key(KEY_A).open(plain) == SECRET


@pytest.mark.parametrize("stored", ["", SECRET, "fernet:", "fernet:not-a-token", "aes:x"])
def test_anything_else_is_unreadable(stored: str) -> None:
    for sealer in (sealer_from_key(None), sealer_from_key(KEY_A)):
        with pytest.raises(WebhookSecretUnreadableError):
            sealer.open(stored)


def _malformed(value: str) -> str:
    with pytest.raises(ValueError) as caught:
        sealer_from_key(value)
    message = str(caught.value)
    assert "FERRYMAN_SECRET_KEY" in message
    assert "Fernet.generate_key().decode()" in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    return message


@pytest.mark.parametrize("value", ["not-a-key", "c2hvcnQ=", KEY_A[:-2], KEY_A[:20], "A" * 43])
def test_a_malformed_key_is_explained_without_quoting_it(value: str) -> None:
    message = _malformed(value)
    assert value not in message
    assert "not a Fernet key" in message


def test_a_signing_secret_pasted_as_the_key() -> None:
    message = _malformed(SECRET)
    assert SECRET not in message and SECRET.removeprefix("whsec_") not in message
    assert "webhook signing secret" in message


def test_an_api_key_pasted_as_the_key() -> None:
    api_key = "fm_0123456789ab_" + "Zm9vYmFyYmF6cXV4cXV1eHF1dXhxdXV4cXV1eHF1dXg"
    message = _malformed(api_key)
    assert api_key not in message and api_key[16:] not in message
    assert "ferryman API key" in message


def test_which_of_several_keys_is_malformed() -> None:
    message = _malformed(f"{KEY_A},{KEY_B},oops")
    assert "key 3 of 3" in message
    assert KEY_A not in message and KEY_B not in message
