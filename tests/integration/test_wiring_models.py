"""The wired service refuses a model no provider serves, before storing anything (I7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferryman.config import Settings
from ferryman.core.errors import InvalidRequestError
from ferryman.services.intake import SubmitRequest
from ferryman.wiring import open_runtime


async def test_unknown_model_is_refused_at_intake(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'f.db'}", results_url=f"file://{tmp_path / 'r'}"
    )
    async with open_runtime(settings) as runtime:
        with pytest.raises(InvalidRequestError) as raised:
            await runtime.intake.submit(
                tenant_id="t1",
                request=SubmitRequest("generate", {"prompt": "hi"}, model="gpt-nonexistent"),
            )
        assert raised.value.errors[0]["loc"] == ["body", "model"]
        assert (await runtime.store.list_jobs(tenant_id=None)).jobs == []
