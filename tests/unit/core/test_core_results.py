"""core.results: where an attempt's output is stored, whose it is, and which are orphans."""

from __future__ import annotations

from collections.abc import Collection

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferryman.core.results import (
    MAX_IDS_PER_QUESTION,
    attempt_id_of,
    checksum,
    gone_jobs,
    job_id_of,
    result_key,
)

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=30)


def test_a_key_names_tenant_job_and_attempt() -> None:
    # The layout every store has always written: old results stay readable.
    assert result_key("acme", "gen_01A", "att_01B") == "acme/gen_01A.att_01B.json"


@given(tenant=names, job_id=names, attempt_id=names)
def test_the_job_and_attempt_of_a_key_are_those_it_was_made_for(
    tenant: str, job_id: str, attempt_id: str
) -> None:
    assert job_id_of(result_key(tenant, job_id, attempt_id)) == job_id
    assert attempt_id_of(result_key(tenant, job_id, attempt_id)) == attempt_id


@pytest.mark.parametrize(
    "key",
    [
        "acme/gen_01A.att_01B.txt",  # another suffix
        "acme/gen_01A.json",  # no attempt
        "acme/.att_01B.json",  # no job
        "acme/gen_01A..json",  # an empty attempt
        "acme/gen_01A.att.01B.json",  # an attempt with a dot in it
        "acme/gen_01A.att_01B.json.tmp",
        "",
    ],
)
def test_a_key_this_rule_did_not_make_names_no_job_and_no_attempt(key: str) -> None:
    assert job_id_of(key) is None
    assert attempt_id_of(key) is None


def test_only_the_last_path_segment_names_the_job() -> None:
    assert job_id_of("a/b.c/gen_01A.att_01B.json") == "gen_01A"
    assert job_id_of("gen_01A.att_01B.json") == "gen_01A"
    assert attempt_id_of("a/b.c/gen_01A.att_01B.json") == "att_01B"


def test_the_checksum_is_sha256_in_lowercase_hex() -> None:
    assert checksum(b"") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert checksum(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


class Oracle:
    """Answers whether any of a group of jobs exists, and counts the questions."""

    def __init__(self, alive: Collection[str]) -> None:
        self.alive = set(alive)
        self.questions: list[list[str]] = []

    async def __call__(self, job_ids: Collection[str]) -> bool:
        self.questions.append(list(job_ids))
        return any(job_id in self.alive for job_id in job_ids)


def _ids(n: int) -> list[str]:
    return [f"gen_{i:05d}" for i in range(n)]


async def test_when_every_job_is_gone_one_question_per_group_suffices() -> None:
    oracle = Oracle(alive=())

    assert await gone_jobs(_ids(MAX_IDS_PER_QUESTION), oracle) == set(_ids(MAX_IDS_PER_QUESTION))
    assert len(oracle.questions) == 1


async def test_no_question_asks_about_more_jobs_than_an_engine_can_bind() -> None:
    oracle = Oracle(alive=())

    gone = await gone_jobs(_ids(MAX_IDS_PER_QUESTION + 1), oracle)

    assert gone == set(_ids(MAX_IDS_PER_QUESTION + 1))
    assert len(oracle.questions) == 2
    assert all(len(q) <= MAX_IDS_PER_QUESTION for q in oracle.questions)


async def test_a_large_purge_is_asked_about_in_full_groups() -> None:
    # Twice the limit, all gone: two questions of a full group each, not three.
    oracle = Oracle(alive=())

    await gone_jobs(_ids(2 * MAX_IDS_PER_QUESTION), oracle)

    assert sorted(len(q) for q in oracle.questions) == [MAX_IDS_PER_QUESTION] * 2


async def test_groups_where_a_job_lives_are_split_until_it_is_found() -> None:
    ids = _ids(64)
    oracle = Oracle(alive={ids[17]})

    assert await gone_jobs(ids, oracle) == set(ids) - {ids[17]}
    # A binary search for one living job: far fewer questions than one per job.
    assert len(oracle.questions) <= 2 * 6 + 1


async def test_nothing_is_asked_about_no_jobs() -> None:
    oracle = Oracle(alive=())
    assert await gone_jobs([], oracle) == set()
    assert oracle.questions == []


async def test_a_repeated_id_is_asked_about_once() -> None:
    oracle = Oracle(alive=())
    assert await gone_jobs(["gen_1", "gen_1", "gen_2"], oracle) == {"gen_1", "gen_2"}
    assert oracle.questions == [["gen_1", "gen_2"]]


@given(
    data=st.lists(st.tuples(st.integers(0, 2_000), st.booleans()), max_size=60),
)
async def test_exactly_the_jobs_that_do_not_exist_are_gone(data: list[tuple[int, bool]]) -> None:
    ids = [f"gen_{n}" for n, _ in data]
    alive = {f"gen_{n}" for n, lives in data if lives}
    oracle = Oracle(alive)

    assert await gone_jobs(ids, oracle) == set(ids) - alive
    assert all(0 < len(q) <= MAX_IDS_PER_QUESTION for q in oracle.questions)
