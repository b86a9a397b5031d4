"""JobQueries: results served only when verified as the job's own, one bad result never
spoils a list, and a list page is bounded in bytes (its jobs' summaries and results)."""

from __future__ import annotations

import dataclasses

import pytest

from ferryman.core.errors import InvalidRequestError, JobNotFoundError, ResultUnreadableError
from ferryman.core.ids import new_job_id
from ferryman.core.job import JobStatus
from ferryman.core.results import result_key
from ferryman.ports.store import LIST_ITEM_BYTES
from ferryman.services.jobs import JobQueries

# The sim echoes a prompt: {"text": "echo: <prompt>"} is the prompt plus 18 bytes.
PROMPT_BYTES = 1000
RESULT_BYTES = PROMPT_BYTES + 18


async def finished_jobs(world, count: int, *, tenant: str = "t1") -> list[str]:
    """Submit ``count`` jobs with ~1 KB results and run them; job ids newest first."""
    jobs = [
        await world.submit(f"{i:04d}" + "w" * (PROMPT_BYTES - 4), tenant=tenant)
        for i in range(count)
    ]
    await world.worker().run_until_idle()
    for job in jobs:
        assert (await world.job(job.job_id)).status is JobStatus.SUCCEEDED
    return [job.job_id for job in reversed(jobs)]


def queries(world, *, list_max_bytes: int) -> JobQueries:
    return JobQueries(
        store=world.store,
        ledger=world.store,
        results=world.results,
        clock=world.clock,
        list_max_bytes=list_max_bytes,
    )


async def damage(world, job_id: str) -> None:
    job = await world.job(job_id)
    key = result_key(job.tenant_id, job.job_id, job.attempt_id)
    world.results._data[key] = b'{"text": "someone else"}'


async def test_a_page_stops_adding_jobs_once_their_results_fill_the_budget(make_world) -> None:
    world = make_world()
    newest_first = await finished_jobs(world, 10)
    # Room for the ten summaries and three results.
    budget = 10 * LIST_ITEM_BYTES + 3 * RESULT_BYTES + 100
    reader = queries(world, list_max_bytes=budget)

    page = await reader.list("t1", limit=50)

    assert [item.summary.job_id for item in page.items] == newest_first[:3]
    assert sum(len(item.result_json) for item in page.items) <= 3 * RESULT_BYTES + 100
    assert page.next_cursor == newest_first[2]


async def test_paging_under_a_budget_serves_every_job_exactly_once_in_order(make_world) -> None:
    world = make_world()
    newest_first = await finished_jobs(world, 10)
    # Room for a page's four summaries and two results.
    reader = queries(world, list_max_bytes=4 * LIST_ITEM_BYTES + 2 * RESULT_BYTES + 10)

    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = await reader.list("t1", limit=4, cursor=cursor)
        pages += 1
        assert 1 <= len(page.items) <= 2
        seen += [item.summary.job_id for item in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break

    assert seen == newest_first
    assert pages == 5


async def test_a_page_always_holds_at_least_one_job(make_world) -> None:
    world = make_world()
    newest_first = await finished_jobs(world, 3)
    reader = queries(world, list_max_bytes=10)

    page = await reader.list("t1", limit=50)

    assert [item.summary.job_id for item in page.items] == newest_first[:1]
    assert page.next_cursor == newest_first[0]


async def test_summaries_count_against_the_budget_too(make_world) -> None:
    world = make_world()
    for i in range(5):
        await world.submit(f"queued {i}")
    reader = queries(world, list_max_bytes=3 * LIST_ITEM_BYTES)

    page = await reader.list("t1", limit=50)

    assert len(page.items) == 3
    assert page.next_cursor == page.items[-1].summary.job_id


async def test_a_list_can_name_its_jobs_and_never_shows_another_tenant_s(make_world) -> None:
    world = make_world()
    mine = await finished_jobs(world, 3)
    [theirs] = await finished_jobs(world, 1, tenant="t2")
    unknown = "gen_01HZZZZZZZZZZZZZZZZZZZZZZZ"

    page = await world.jobs.list("t1", job_ids=[mine[2], theirs, unknown, mine[0], mine[2]])

    assert [item.summary.job_id for item in page.items] == [mine[0], mine[2]]
    assert all(item.result["text"].startswith("echo: ") for item in page.items)
    assert (await world.jobs.list("t1", job_ids=[])).items == []


async def test_a_list_names_at_most_a_hundred_jobs(make_world) -> None:
    world = make_world()
    too_many = [new_job_id() for _ in range(101)]

    with pytest.raises(InvalidRequestError, match="at most 100"):
        await world.jobs.list("t1", job_ids=too_many)


async def test_a_damaged_result_is_an_error_on_its_item_and_the_rest_are_served(
    make_world,
) -> None:
    world = make_world()
    newest_first = await finished_jobs(world, 4)
    await damage(world, newest_first[1])

    page = await world.jobs.list("t1", limit=50)

    assert [item.summary.job_id for item in page.items] == newest_first
    broken = page.items[1]
    assert broken.result_json is None
    assert isinstance(broken.result_error, ResultUnreadableError)
    assert broken.result_error.code == "result_unreadable"
    for item in (page.items[0], *page.items[2:]):
        assert item.result_error is None
        assert item.result["text"].startswith("echo: ")


async def test_get_refuses_a_damaged_result_rather_than_serving_it(make_world) -> None:
    world = make_world()
    [job_id] = await finished_jobs(world, 1)
    await damage(world, job_id)

    with pytest.raises(ResultUnreadableError):
        await world.jobs.get("t1", job_id)


async def test_a_result_published_under_another_job_s_ref_is_never_served(make_world) -> None:
    world = make_world()
    mine, theirs = (
        await finished_jobs(world, 1, tenant="t1"),
        await finished_jobs(world, 1, tenant="t2"),
    )
    their_ref = (await world.job(theirs[0])).result_ref
    job = await world.job(mine[0])
    world.store.store._jobs[job.job_id] = dataclasses.replace(job, result_ref=their_ref)

    with pytest.raises(ResultUnreadableError):
        await world.jobs.get("t1", mine[0])


async def test_a_stored_result_that_is_not_json_is_unreadable(make_world) -> None:
    world = make_world()
    [job_id] = await finished_jobs(world, 1)
    job = await world.job(job_id)
    ref = await world.results.put(result_key("t1", job_id, job.attempt_id), b"{not json")
    world.store.store._jobs[job_id] = dataclasses.replace(job, result_ref=ref)

    with pytest.raises(ResultUnreadableError, match="JSON"):
        await world.jobs.get("t1", job_id)


async def test_get_serves_the_stored_bytes_as_they_are(make_world) -> None:
    world = make_world()
    [job_id] = await finished_jobs(world, 1)
    job = await world.job(job_id)
    stored = world.results._data[result_key("t1", job_id, job.attempt_id)]

    view = await world.jobs.get("t1", job_id)

    assert view.result_json == stored


async def test_operators_inspect_any_tenant_s_job_and_its_history(make_world) -> None:
    world = make_world()
    [job_id] = await finished_jobs(world, 1, tenant="t2")

    job = await world.jobs.inspect(job_id)
    same, events, attempts = await world.jobs.inspect_history(job_id)

    assert job.tenant_id == "t2"
    assert same == job
    assert events
    assert [attempt.worker_id for attempt in attempts] == ["w1"]
    with pytest.raises(JobNotFoundError):
        await world.jobs.inspect("gen_01HZZZZZZZZZZZZZZZZZZZZZZZ")
