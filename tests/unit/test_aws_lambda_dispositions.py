"""The Lambda worker's verdict table: which deliveries' messages the event source
mapping may delete, one case per verdict."""

from __future__ import annotations

import pytest

from ferryman.aws_lambda.dispositions import Disposition, disposition, message_may_go
from ferryman.services.verdicts import Verdict


def test_every_verdict_has_an_entry() -> None:
    for verdict in Verdict:
        assert isinstance(disposition(verdict), Disposition)


def test_a_published_result_goes() -> None:
    assert message_may_go(Verdict.SUCCEEDED, acknowledged=True)


def test_a_durable_failure_goes() -> None:
    assert message_may_go(Verdict.FAILED, acknowledged=True)


def test_a_dead_lettered_job_is_a_durable_failure_and_goes() -> None:
    assert message_may_go(Verdict.DEAD_LETTERED, acknowledged=True)


def test_a_finished_cancel_goes() -> None:
    assert message_may_go(Verdict.CANCELLED, acknowledged=True)


def test_a_duplicate_of_a_finished_job_goes() -> None:
    assert message_may_go(Verdict.DUPLICATE, acknowledged=True)


@pytest.mark.parametrize(
    "verdict", [Verdict.SUCCEEDED, Verdict.FAILED, Verdict.DEAD_LETTERED, Verdict.CANCELLED]
)
def test_a_terminal_job_goes_even_when_the_worker_did_not_ack(verdict: Verdict) -> None:
    # An exhausted job failed by someone else meanwhile: any later delivery is a duplicate.
    assert message_may_go(verdict, acknowledged=False)


def test_a_recorded_retry_stays_since_its_message_carries_the_retry() -> None:
    assert not message_may_go(Verdict.RETRY_SCHEDULED, acknowledged=False)


def test_a_lost_lease_stays() -> None:
    assert not message_may_go(Verdict.LEASE_LOST, acknowledged=False)


def test_a_released_job_stays() -> None:
    assert not message_may_go(Verdict.RELEASED, acknowledged=False)


def test_a_deferral_that_hid_the_message_stays() -> None:
    # Not yet due, another attempt's job, a payload this worker cannot read, a raise.
    assert not message_may_go(Verdict.DEFERRED, acknowledged=False)


def test_a_deferral_that_put_the_job_back_as_a_new_message_goes() -> None:
    # A paused provider: a new message carries the job, the worker acked this one.
    assert message_may_go(Verdict.DEFERRED, acknowledged=True)
