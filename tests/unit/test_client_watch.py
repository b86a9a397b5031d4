"""What a wait for many jobs asks and when it ends (client/calls.py Watch), and how a
wait's ``timeout`` and its old name ``timeout_seconds`` are read: no I/O, a fake clock."""

from __future__ import annotations

from typing import Any

import pytest

import ferryman.client.calls as calls_module
from ferryman.client import Job, JobStatus, Page, WaitTimeoutError
from ferryman.client.calls import (
    DEFAULT_TIMEOUT,
    DEFAULT_WAIT_TIMEOUT_SECONDS,
    Poll,
    Watch,
    wait_limit,
)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The client's monotonic clock, moved by hand: ``clock[0] += seconds``."""
    now = [1000.0]
    monkeypatch.setattr(calls_module, "_monotonic", lambda: now[0])
    return now


def job(job_id: str, status: str = "QUEUED", **fields: Any) -> Job:
    return Job.model_validate({"job_id": job_id, "status": status, **fields})


def page(*jobs: Job, next_cursor: str | None = None) -> Page[Job]:
    return Page[Job](data=list(jobs), next_cursor=next_cursor)


def watch(ids: list[str], timeout_seconds: float | None = 10.0) -> Watch:
    return Watch(ids, timeout_seconds=timeout_seconds, initial_interval=1, max_interval=2)


def test_timeout_is_the_new_name_and_timeout_seconds_the_old_one() -> None:
    assert wait_limit(DEFAULT_TIMEOUT, DEFAULT_TIMEOUT) == DEFAULT_WAIT_TIMEOUT_SECONDS == 300
    assert wait_limit(5, DEFAULT_TIMEOUT) == 5
    assert wait_limit(DEFAULT_TIMEOUT, 7) == 7
    assert wait_limit(None, DEFAULT_TIMEOUT) is None
    assert wait_limit(DEFAULT_TIMEOUT, None) is None
    with pytest.raises(TypeError, match="not both"):
        wait_limit(5, 5)
    with pytest.raises(TypeError, match="not both"):
        wait_limit(None, 300)


def test_a_wait_without_a_limit_backs_off_and_never_times_out(clock: list[float]) -> None:
    poll = Poll(timeout_seconds=None, initial_interval=1, max_interval=2)
    clock[0] += 1e9

    assert [poll.next_wait(job("gen_a")) for _ in range(3)] == [1, 1.5, 2]


def test_a_timed_out_wait_is_a_timeout_error_naming_the_job(clock: list[float]) -> None:
    poll = Poll(timeout_seconds=3, initial_interval=1, max_interval=2)
    clock[0] += 3

    with pytest.raises(TimeoutError) as caught:
        poll.next_wait(job("gen_a", "PROCESSING"))

    assert isinstance(caught.value, WaitTimeoutError)
    assert caught.value.job.job_id == "gen_a"
    assert str(caught.value) == "job gen_a still PROCESSING after 3s"


def test_each_job_is_polled_once_in_the_order_given_a_hundred_to_a_request() -> None:
    ids = [f"gen_{i:03d}" for i in range(250)]

    polls = watch([*ids, ids[0], ids[249]]).polls()

    assert [call.params["job_id"] for call in polls] == [ids[:100], ids[100:200], ids[200:]]
    assert [call.params["limit"] for call in polls] == ["100", "100", "50"]
    assert all(call.path == "/v1/generations" and "cursor" not in call.params for call in polls)


def test_no_jobs_means_no_request_and_nothing_to_wait_for() -> None:
    empty = watch([])

    assert empty.waiting is False
    assert empty.polls() == []


def test_a_page_cut_short_is_followed_by_its_cursor() -> None:
    w = watch(["gen_a", "gen_b"])
    [call] = w.polls()

    follow = w.listed(call, page(job("gen_b"), next_cursor="gen_b"))
    assert follow is not None
    assert w.listed(follow, page(job("gen_a"))) is None

    assert follow.params == {**call.params, "cursor": "gen_b"}
    assert w.to_get() == []


def test_finished_jobs_come_once_in_the_order_given_and_are_polled_no_more() -> None:
    w = watch(["gen_a", "gen_b", "gen_c"])
    [call] = w.polls()
    w.listed(call, page(job("gen_c", "SUCCEEDED"), job("gen_b"), job("gen_a", "CANCELLED")))

    assert [j.job_id for j in w.finished()] == ["gen_a", "gen_c"]
    assert w.finished() == []
    assert [c.params["job_id"] for c in w.polls()] == [["gen_b"]]


def test_a_job_the_list_did_not_settle_is_read_by_itself() -> None:
    w = watch(["gen_a", "gen_b", "gen_c"])
    [call] = w.polls()
    unreadable = {"code": "result_unreadable", "message": "no"}
    w.listed(call, page(job("gen_b", "SUCCEEDED", result_error=unreadable), job("gen_c")))

    # gen_a was not shown (unknown, or another tenant's: GET says which); gen_b's result
    # could not be served (GET raises why).
    assert w.to_get() == ["gen_a", "gen_b"]
    w.got(job("gen_a", "FAILED"))
    w.got(job("gen_b", "SUCCEEDED", result={"text": "hi"}))
    assert w.to_get() == []
    assert [j.job_id for j in w.finished()] == ["gen_a", "gen_b"]


def test_time_up_names_the_unfinished_jobs_as_last_seen_and_the_finished(
    clock: list[float],
) -> None:
    w = watch(["gen_a", "gen_b", "gen_c"], timeout_seconds=5)
    [call] = w.polls()
    w.listed(call, page(job("gen_c", "PROCESSING"), job("gen_b", "SUCCEEDED"), job("gen_a")))
    w.finished()
    assert w.next_wait() == 1
    clock[0] += 5

    with pytest.raises(WaitTimeoutError) as caught:
        w.next_wait()

    assert [j.job_id for j in caught.value.unfinished] == ["gen_a", "gen_c"]
    assert caught.value.unfinished[1].status is JobStatus.PROCESSING
    assert caught.value.job is caught.value.unfinished[0]
    assert list(caught.value.finished) == ["gen_b"]
    assert str(caught.value) == "2 (of 3) jobs unfinished after 5s"
