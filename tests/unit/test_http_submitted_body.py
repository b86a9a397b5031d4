"""The 202 of a submit, assembled directly (http/views.py SubmittedBody), is byte for
byte what the general JsonBody makes of the same content and headers."""

from __future__ import annotations

import pytest

from ferryman.core.job import Job
from ferryman.http.views import JsonBody, SubmittedBody, submission_body


def _job() -> Job:
    return Job(
        tenant_id="acme",
        job_id="gen_01M8Q566MMDRTJP2EXNF5YMSC2",
        task="generate",
        model="sim",
        input={"prompt": "hi"},
        request_hash="0" * 64,
        created_at=1_700_000_000.123456,
        updated_at=1_700_000_000.123456,
        correlation_id="cor_test",
    )


@pytest.mark.parametrize("replayed", [False, True])
def test_the_202_is_what_json_body_makes(replayed: bool) -> None:
    job = _job()
    headers = {"Location": f"/v1/generations/{job.job_id}"}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    general = JsonBody(submission_body(job), status_code=202, headers=headers)
    direct = SubmittedBody(job, replayed=replayed)
    assert direct.status_code == general.status_code == 202
    assert direct.body == general.body
    assert direct.raw_headers == general.raw_headers
    assert direct.background is None
    assert dict(direct.headers) == dict(general.headers)
