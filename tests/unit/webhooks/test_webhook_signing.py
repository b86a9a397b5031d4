"""Signatures as the standard defines them: verified by its reference library, one per
secret after a rotation, and the standard's own published example reproduced."""

from __future__ import annotations

import base64
import time

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from ferryman.webhooks.signing import new_secret, signature

BODY = b'{"type":"generation.succeeded","data":{"job_id":"job_1","note":"caf\xc3\xa9"}}'


def headers(webhook_id: str, timestamp: int, value: str) -> dict[str, str]:
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": value,
    }


def test_new_secret_is_whsec_and_32_random_bytes() -> None:
    secrets = {new_secret() for _ in range(50)}
    assert len(secrets) == 50
    for secret in secrets:
        assert secret.startswith("whsec_")
        assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32


def test_a_signature_verifies_with_the_reference_library() -> None:
    secret, now = new_secret(), int(time.time())
    value = signature([secret], "msg_job_1_3", now, BODY)
    assert value.startswith("v1,") and " " not in value
    payload = Webhook(secret).verify(BODY, headers("msg_job_1_3", now, value))
    assert payload["data"]["note"] == "café"
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(BODY, headers("msg_job_1_3", now, value))
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY + b" ", headers("msg_job_1_3", now, value))


def test_after_a_rotation_each_secret_signs_and_each_signature_verifies_alone() -> None:
    current, previous, now = new_secret(), new_secret(), int(time.time())
    value = signature([current, previous], "msg_job_1_3", now, BODY)
    first, second = value.split(" ")
    for secret, own in ((current, first), (previous, second)):
        Webhook(secret).verify(BODY, headers("msg_job_1_3", now, value))
        Webhook(secret).verify(BODY, headers("msg_job_1_3", now, own))
    with pytest.raises(WebhookVerificationError):
        Webhook(current).verify(BODY, headers("msg_job_1_3", now, second))
    with pytest.raises(WebhookVerificationError):
        Webhook(previous).verify(BODY, headers("msg_job_1_3", now, first))


def test_the_standards_published_example() -> None:
    # The Standard Webhooks specification's example (and its libraries' test vector).
    value = signature(
        ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1614265330,
        b'{"test": 2432232314}',
    )
    assert value == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_no_secret_or_a_body_that_is_not_utf8_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one secret"):
        signature([], "msg_1", 1, BODY)
    with pytest.raises(ValueError):
        signature([new_secret()], "msg_1", 1, b"\xff")
