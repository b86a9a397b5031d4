"""The request fingerprint, and the rules for Idempotency-Key values.

Two requests are the same logical request when their canonical JSON is equal:
keys sorted, no insignificant whitespace, UTF-8, integers and floats as JSON
writes them. The fingerprint is the sha256 of that text.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ferryman.core.errors import InvalidIdempotencyKeyError

MAX_KEY_LENGTH = 255


def canonical_json(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def request_fingerprint(
    *, task: str, input: dict[str, Any], model: str, options: dict[str, Any] | None = None
) -> str:
    """sha256 of the canonical request: what makes two submissions the same job."""
    canonical = canonical_json(
        {"task": task, "input": input, "model": model, "options": options or {}}
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def validate_idempotency_key(key: str) -> str:
    """Return the key, or raise if it is not 1-255 printable ASCII characters."""
    if not 1 <= len(key) <= MAX_KEY_LENGTH or not all(0x20 <= ord(c) <= 0x7E for c in key):
        raise InvalidIdempotencyKeyError()
    return key


@dataclass(frozen=True, slots=True)
class IdempotencyEntry:
    """(tenant, key) maps to one job until expires_at; then the key may name a new job."""

    tenant_id: str
    key: str
    job_id: str
    request_hash: str
    expires_at: float

    def live(self, now: float) -> bool:
        return now < self.expires_at
