"""Identifiers: sortable, unguessable, with a prefix that says what they name."""

from __future__ import annotations

import secrets

from ulid import ULID


def new_job_id() -> str:
    return f"gen_{ULID()}"


def new_attempt_id() -> str:
    return f"att_{ULID()}"


def new_correlation_id() -> str:
    return f"cor_{secrets.token_hex(12)}"


def new_worker_id(hostname: str, pid: int) -> str:
    return f"{hostname}:{pid}:{secrets.token_hex(3)}"
