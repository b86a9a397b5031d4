"""The error map: every refusal a service can raise has its status, code and title,
and every answer that asks the caller to come back later says when (Retry-After)."""

from __future__ import annotations

import json

import pytest

from ferryman.core.errors import (
    BackendUnavailableError,
    BacklogQuotaExceededError,
    FerrymanError,
    PausedError,
    ProviderError,
    QueueUnavailableError,
    ResultsUnavailableError,
    ResultUnreadableError,
    StorageQuotaExceededError,
    StoreUnavailableError,
    UnsupportedFieldError,
)
from ferryman.http.error_map import PROBLEM_MEDIA_TYPE, render_error
from ferryman.http.errors import RateLimitedError, RequestTimeoutError, TooManyConnectionsError


@pytest.mark.parametrize(
    ("error", "status", "code", "retry_after"),
    [
        (UnsupportedFieldError(), 422, "unsupported_field", None),
        (BacklogQuotaExceededError(), 429, "backlog_quota_exceeded", "30"),
        (StorageQuotaExceededError(), 507, "storage_quota_exceeded", None),
        (ResultsUnavailableError(), 503, "results_unavailable", "5"),
        (ResultUnreadableError(), 500, "result_unreadable", None),
        (StoreUnavailableError(), 503, "store_unavailable", "5"),
        (QueueUnavailableError(), 503, "queue_unavailable", "5"),
        (BackendUnavailableError(), 503, "backend_unavailable", "5"),
        (PausedError(retry_after_seconds=7), 503, "paused", "7"),
        (RateLimitedError(retry_after_seconds=3), 429, "rate_limited", "3"),
        (RequestTimeoutError(), 408, "request_timeout", None),
        (TooManyConnectionsError(), 503, "too_many_connections", "1"),
    ],
)
def test_each_error_has_its_status_code_and_retry_after(
    error: FerrymanError, status: int, code: str, retry_after: str | None
) -> None:
    response = render_error(error)

    body = json.loads(bytes(response.body))
    assert response.status_code == status
    assert response.headers["content-type"] == PROBLEM_MEDIA_TYPE
    assert (body["status"], body["code"]) == (status, code)
    assert body["type"].endswith("/" + code)
    assert response.headers.get("Retry-After") == retry_after


def test_an_unreadable_result_says_so_in_its_title() -> None:
    body = json.loads(bytes(render_error(ResultUnreadableError()).body))

    assert body["title"] == "Stored result unreadable"


def test_an_error_carrying_its_own_wait_overrides_the_default() -> None:
    class SlowStoreError(StoreUnavailableError):
        retry_after_seconds = 12.5

    assert render_error(SlowStoreError()).headers["Retry-After"] == "13"


def test_an_error_outside_the_table_is_a_bare_500() -> None:
    response = render_error(ProviderError("provider said: secret"))

    body = json.loads(bytes(response.body))
    assert (response.status_code, body["code"]) == (500, "internal_error")
    assert "secret" not in response.body.decode()
