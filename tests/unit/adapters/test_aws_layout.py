"""The table's shape keeps what changes often out of the indexes and the job's item.

A write costs a unit per KB of the item and one per index entry it puts, rewrites or
deletes (docs/benchmarks.md, "AWS requests per job"): what a change writes must not
touch the list indexes, and must not carry the job's input.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from ferryman.adapters import job_rows
from ferryman.adapters.aws import job_items, layout
from ferryman.adapters.aws.job_items import input_item, job_item, job_update_values
from ferryman.core.job import Job, JobStatus


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


OUTBOX = {"webhook_url", "webhook_due_at", "webhook_attempts", "webhook_event_seq", "wpk", "wsk"}


def _rows_with_the_outbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """job_rows listing the webhook fields as columns, defaults and all (as the SQL
    engines' rows do): the items must not take them from there."""

    def listing(columns: Callable[[Job], dict[str, Any]]) -> Callable[[Job], dict[str, Any]]:
        return lambda job: {
            **columns(job),
            **{name: getattr(job, name) for name in job_items.WEBHOOK_FIELDS},
        }

    monkeypatch.setattr(job_items, "job_update_params", listing(job_rows.job_update_params))
    monkeypatch.setattr(job_items, "job_params", listing(job_rows.job_params))


@pytest.mark.parametrize("rows_list_the_outbox", [False, True])
def test_a_job_without_a_webhook_url_writes_nothing_of_the_outbox(
    rows_list_the_outbox: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if rows_list_the_outbox:
        _rows_with_the_outbox(monkeypatch)
    job = _job("p")
    done = dataclasses.replace(job, status=JobStatus.SUCCEEDED, completed_at=2.0)

    # Not even a REMOVE: its item and every write weigh what they did before webhooks.
    assert OUTBOX & set(job_item(job)) == set()
    assert OUTBOX & set(job_update_values(done)) == set()


@pytest.mark.parametrize("rows_list_the_outbox", [False, True])
def test_an_owed_webhook_puts_the_job_in_the_webhook_index_and_out_of_retention_s(
    rows_list_the_outbox: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if rows_list_the_outbox:
        _rows_with_the_outbox(monkeypatch)
    job = dataclasses.replace(_job("p"), webhook_url="https://h.example.com/")
    owed = dataclasses.replace(
        job, status=JobStatus.SUCCEEDED, completed_at=2.0, webhook_due_at=2.5, webhook_event_seq=4
    )
    settled = dataclasses.replace(owed, webhook_due_at=None, webhook_attempts=1)

    values, after = job_update_values(owed), job_update_values(settled)

    shard = layout.shard_of(job.job_id, layout.WEBHOOK_SHARDS)
    assert (values["wpk"], values["wsk"]) == (
        layout.webhook_partition(shard),
        f"{layout.sortable_time(2.5)}#{job.job_id}",
    )
    assert values["spk"] is None  # retention does not see it while it is owed
    assert (values["webhook_due_at"], values["webhook_event_seq"]) == (2.5, 4)
    assert "webhook_url" not in values  # fixed at intake
    assert job_item(job)["webhook_url"] == {"S": "https://h.example.com/"}
    assert after["wpk"] is None and after["webhook_due_at"] is None
    assert after["spk"] == layout.sweep_partition(
        "done", layout.shard_of(job.job_id, layout.SWEEP_SHARDS)
    )


def test_no_change_to_a_job_rewrites_its_webhook_index_entry_but_for_its_due_time() -> None:
    assert _projected(layout.INDEX_WEBHOOKS) == set(layout.index_keys(layout.INDEX_WEBHOOKS))
