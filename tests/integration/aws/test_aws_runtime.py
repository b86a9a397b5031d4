"""A process on the AWS engine refuses, at start, a body limit it could not store.

A job's input and metadata arrive in one request body, and a DynamoDB item holds 400
KB: ``FERRYMAN_MAX_BODY_BYTES`` above the engine's ``max_job_bytes`` would accept jobs
the table cannot hold. The process says so, naming both, before serving anything.
"""

from __future__ import annotations

import pytest

from ferryman.config import ConfigurationError, load_settings
from ferryman.wiring import open_runtime


async def test_a_body_limit_over_what_one_job_item_holds_stops_the_start(aws_url: str) -> None:
    settings = load_settings(database_url=aws_url, max_body_bytes=400_000)
    with pytest.raises(ConfigurationError) as refused:
        async with open_runtime(settings):
            pass
    message = str(refused.value)
    assert "FERRYMAN_MAX_BODY_BYTES=400000" in message
    assert "350000" in message


async def test_the_default_body_limit_fits_and_the_runtime_opens(aws_url: str) -> None:
    async with open_runtime(load_settings(database_url=aws_url)) as runtime:
        assert runtime.store.store.capabilities.max_job_bytes == 350_000
        assert runtime.settings.http.max_body_bytes <= 350_000
