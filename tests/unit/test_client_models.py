"""The client's models read what the API sends, today's and tomorrow's: added fields are
kept, times parse as aware UTC datetimes whichever form they come in, and a finished
job's outcome is its output or a typed error."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from ferryman.client import (
    ClientError,
    FailureClass,
    Job,
    JobCancelledError,
    JobFailedError,
    JobHistory,
    JobStatus,
    Page,
)
from ferryman.client.calls import Poll, outcome

MOMENT = datetime(2026, 11, 30, 14, 23, 12, 123456, tzinfo=UTC)


def job(**fields: Any) -> dict[str, Any]:
    return {"job_id": "gen_1", "status": "SUCCEEDED", "attempt_count": 1, **fields}


@pytest.mark.parametrize(
    "at",
    [
        "2026-11-30T14:23:12.123456Z",  # RFC 3339 UTC, as the API serves times
        "2026-11-30T14:23:12.123456+00:00",
        MOMENT.timestamp(),  # epoch seconds, as older APIs served not_before
    ],
)
def test_times_parse_as_aware_utc_datetimes_in_any_form(at: str | float) -> None:
    parsed = Job.model_validate(job(created_at=at, not_before=at))
    assert parsed.created_at is not None
    assert parsed.created_at.utcoffset() is not None
    assert parsed.created_at == MOMENT
    assert parsed.api_json["not_before"] == at  # an unknown field, kept as sent


def test_added_fields_are_kept_and_the_api_json_is_exactly_what_was_sent() -> None:
    sent = job(result={"text": "hi"}, future_field={"nested": [1, 2]}, error=None)
    parsed = Job.model_validate(sent)
    assert parsed.api_json == sent
    assert parsed.model_extra == {"future_field": {"nested": [1, 2]}}
    assert parsed.result == {"text": "hi"}
    assert parsed.terminal


def test_a_page_keeps_each_item_s_json() -> None:
    sent = {"data": [job(job_id="gen_2", x=1), job()], "next_cursor": "gen_1"}
    page = Page[Job].model_validate(sent)
    assert [j.job_id for j in page.data] == ["gen_2", "gen_1"]
    assert page.data[0].api_json == sent["data"][0]
    assert page.api_json == sent


def test_error_class_known_or_new() -> None:
    known = Job.model_validate(
        job(status="FAILED", error={"code": "c", "class": "THROTTLED", "message": "m"})
    )
    new = Job.model_validate(
        job(status="FAILED", error={"code": "c", "class": "BUDGET_SPENT", "message": "m"})
    )
    assert known.error is not None and known.error.failure_class is FailureClass.THROTTLED
    assert new.error is not None and new.error.failure_class == "BUDGET_SPENT"


def test_an_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="status"):
        Job.model_validate(job(status="LOST"))


def test_history_reads_events_and_attempts() -> None:
    history = JobHistory.model_validate(
        {
            "events": [{"seq": 1, "at": "2026-11-30T14:23:12Z", "kind": "ACCEPTED", "detail": {}}],
            "attempts": [{"attempt_no": 1, "outcome": "retry", "failure_class": "TRANSIENT"}],
        }
    )
    assert history.events[0].at.tzinfo is not None
    assert history.attempts[0].failure_class is FailureClass.TRANSIENT


class Output(BaseModel):
    text: str


def test_outcome_of_a_success_is_the_output_typed_if_asked() -> None:
    done = Job.model_validate(job(result={"text": "hi"}))
    assert outcome(done) == {"text": "hi"}
    assert outcome(done, Output) == Output(text="hi")
    with pytest.raises(ClientError, match="does not match"):
        outcome(Job.model_validate(job(result={"other": 1})), Output)


def test_outcome_of_a_failure_or_a_cancel_is_a_typed_error() -> None:
    failed = Job.model_validate(
        job(status="FAILED", error={"code": "refused", "class": "SAFETY_REJECTED", "message": "no"})
    )
    with pytest.raises(JobFailedError) as caught:
        outcome(failed)
    assert caught.value.failure_class is FailureClass.SAFETY_REJECTED
    assert caught.value.error_code == "refused"
    assert caught.value.job is failed
    assert "SAFETY_REJECTED" in caught.value.message
    with pytest.raises(JobCancelledError):
        outcome(Job.model_validate(job(status="CANCELLED")))


def test_a_poll_ends_on_a_finished_job_and_backs_off_otherwise() -> None:
    poll = Poll(timeout_seconds=60, initial_interval=1, max_interval=2)
    waiting = Job.model_validate(job(status="QUEUED"))
    assert [poll.next_wait(waiting) for _ in range(3)] == [1, 1.5, 2]
    assert poll.next_wait(Job.model_validate(job())) is None
    assert JobStatus.SUCCEEDED.terminal
