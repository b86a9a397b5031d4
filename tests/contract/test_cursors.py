"""Page cursors bind every engine: one format, written and read by core/cursors.py.

A page's ``next_cursor`` has the same shape on every engine and resumes the list
exactly after the page; a cursor no list gave is refused by the port itself with
InvalidCursorError (422 ``invalid_request`` over HTTP), never read as "from the
start", never handed to a driver to fail on its own way.
"""

from __future__ import annotations

import base64
import re

import pytest

from ferryman.core.cursors import CURSOR_PATTERN, InvalidCursorError, cursor_after, position_of
from ferryman.core.errors import InvalidRequestError
from ferryman.core.ids import new_job_id

pytestmark = pytest.mark.timeout(30)

A_JOB_ID = new_job_id()
# Cursors no list of jobs gives: each shape a client (or a bug) could send.
MALFORMED = {
    "empty": "",
    "too long": A_JOB_ID + "0" * 600,
    "one character short": A_JOB_ID[:-1],
    "non-ASCII": "gen_" + "É" * 26,
    "lone surrogate": "gen_" + "\udcff" * 26,
    "NUL inside": A_JOB_ID[:10] + "\x00" + A_JOB_ID[11:],
    "trailing newline": A_JOB_ID[:-1] + "\n",
    "lower case": A_JOB_ID.lower(),
    "base64 of a job id": base64.urlsafe_b64encode(A_JOB_ID.encode()).decode(),
    "the undecodable letters' cursor": "1700000000.5~dl_0a1b2c",
    "another id's prefix": "att_" + A_JOB_ID[4:],
}


async def _jobs(engine, job_factory, count):
    """``count`` jobs of tenant t1; their ids newest first."""
    ids = []
    for _ in range(count):
        job = job_factory()
        await engine.accept(job)
        ids.append(job.job_id)
        engine.advance(1)
    return ids[::-1]


async def test_next_cursor_has_one_format_and_resumes_right_after_the_page(engine, job_factory):
    ids = await _jobs(engine, job_factory, 5)

    first = await engine.store.list_jobs(tenant_id="t1", limit=2)
    second = await engine.store.list_jobs(tenant_id="t1", limit=2, cursor=first.next_cursor)
    last = await engine.store.list_jobs(tenant_id="t1", limit=2, cursor=second.next_cursor)

    for page in (first, second):
        assert page.next_cursor == cursor_after(page.jobs[-1].job_id)
        assert re.fullmatch(CURSOR_PATTERN, page.next_cursor)
        assert position_of(page.next_cursor) == page.jobs[-1].job_id
    assert [job.job_id for page in (first, second, last) for job in page.jobs] == ids
    assert last.next_cursor is None


async def test_a_budget_cut_page_s_cursor_is_the_same_format(engine, job_factory):
    ids = await _jobs(engine, job_factory, 3)

    page = await engine.store.list_jobs(tenant_id="t1", limit=50, max_bytes=1)

    assert [job.job_id for job in page.jobs] == ids[:1]
    assert page.next_cursor == cursor_after(ids[0])


@pytest.mark.parametrize("cursor", list(MALFORMED.values()), ids=list(MALFORMED))
async def test_a_malformed_cursor_is_refused_by_the_port(engine, job_factory, cursor):
    await _jobs(engine, job_factory, 2)

    with pytest.raises(InvalidCursorError) as refused:
        await engine.port.list_jobs(tenant_id="t1", cursor=cursor)
    # Every shape, whatever the filters: even a list that reads nothing refuses it.
    with pytest.raises(InvalidCursorError):
        await engine.port.list_jobs(tenant_id=None, job_ids=[], cursor=cursor)

    assert isinstance(refused.value, InvalidRequestError)
    assert refused.value.code == "invalid_request"
    assert refused.value.message == "The cursor is not a next_cursor a list of jobs gave."


async def test_a_well_formed_cursor_of_no_job_still_pages_by_order(engine, job_factory):
    """A cursor is a position, not a reference: one whose job is gone (purged) or never
    was still resumes after where that job would sort."""
    ids = await _jobs(engine, job_factory, 3)
    gone = new_job_id()  # newer than every listed job

    page = await engine.store.list_jobs(tenant_id="t1", cursor=cursor_after(gone))
    nothing_older = await engine.store.list_jobs(tenant_id="t1", cursor="gen_" + "0" * 26)

    assert [job.job_id for job in page.jobs] == ids
    assert nothing_older.jobs == []
