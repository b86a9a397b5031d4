"""The table's shape keeps what changes often out of the indexes and the job's item.

A write costs a unit per KB of the item and one per index entry it puts, rewrites or
deletes (docs/benchmarks.md, "AWS requests per job"): what a change writes must not
touch the list indexes, and must not carry the job's input.
"""

from __future__ import annotations

from ferryman.adapters.aws import layout
from ferryman.adapters.aws.job_items import input_item, job_item, job_update_values
from ferryman.core.job import Job


def _job(prompt: str) -> Job:
    return Job(
        tenant_id="t1",
        job_id="gen_01J0000000000000000000000",
        task="generate",
        model="sim",
        input={"prompt": prompt},
        request_hash="h",
        created_at=1.0,
        updated_at=1.0,
        correlation_id="c",
    )


def _projected(index: str) -> set[str]:
    definition = layout.table_definition("t")
    (found,) = (i for i in definition["GlobalSecondaryIndexes"] if i["IndexName"] == index)
    keys = {k["AttributeName"] for k in found["KeySchema"]}
    return keys | set(found["Projection"].get("NonKeyAttributes", ()))


def test_no_change_to_a_job_writes_an_attribute_the_list_indexes_hold() -> None:
    moved = set(job_update_values(_job("p")))

    for index in (layout.INDEX_BY_TENANT, layout.INDEX_ALL_JOBS):
        assert _projected(index) & moved == set(), index


def test_the_lists_still_find_the_job_id_and_filter_by_task_in_the_index() -> None:
    for index in (layout.INDEX_BY_TENANT, layout.INDEX_ALL_JOBS):
        assert {"job_id", "task"} <= _projected(index)


def test_the_input_is_in_its_own_item_and_no_change_writes_it() -> None:
    job = _job("a long prompt " * 1_000)

    assert "input" not in job_item(job)
    assert "input" not in job_update_values(job)
    stored = input_item(job)
    assert (stored["pk"]["S"], stored["sk"]["S"]) == (layout.job_pk(job.job_id), layout.INPUT_SK)
    assert "a long prompt" in stored["input"]["S"]
