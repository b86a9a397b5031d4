"""core.copies: a generated copy that behaves as dataclasses.replace for a Job."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferryman.core.copies import replacer
from ferryman.core.errors import FailureClass
from ferryman.core.job import DispatchState, Job, JobError, JobStatus, evolve

FIELDS = [f.name for f in dataclasses.fields(Job)]
# A value of each field's type, unlike any job_factory makes.
OTHER: dict[str, Any] = {
    "tenant_id": "other",
    "job_id": "gen_OTHER",
    "task": "extract",
    "model": "sim-2",
    "input": {"prompt": "other"},
    "request_hash": "f" * 64,
    "created_at": 1.5,
    "updated_at": 2.5,
    "correlation_id": "cor_other",
    "idempotency_key": "key",
    "metadata": {"k": "v"},
    "payload_version": 7,
    "status": JobStatus.PROCESSING,
    "dispatch_state": DispatchState.DISPATCHED,
    "attempt_count": 3,
    "failure_count": 2,
    "invalid_output_count": 1,
    "fence": 4,
    "deliveries_without_outcome": 1,
    "fallback_level": 1,
    "revision": 9,
    "event_seq": 12,
    "attempt_id": "att_x",
    "worker_id": "w9",
    "lease_until": 99.0,
    "not_before": 98.0,
    "cancel_requested": True,
    "result_ref": "ref",
    "error": JobError(code="c", failure_class=FailureClass.TRANSIENT, message="m"),
    "traceparent": "00-x",
    "completed_at": 97.0,
}


def test_every_field_has_a_value_to_change_to() -> None:
    assert sorted(OTHER) == sorted(FIELDS)


# The Job's copy is made once, when core/job.py is imported; the same made again here,
# while the test runs, is held to the same rules (so a change to how a copy is made is
# seen by a test, not only by the first import).
COPIES: dict[str, Callable[[], Callable[..., Job]]] = {
    "core.job.evolve": lambda: evolve,
    "replacer(Job)": lambda: replacer(Job),
}


@pytest.mark.parametrize("copier", COPIES.values(), ids=COPIES.keys())
@given(st.sets(st.sampled_from(FIELDS)))
def test_a_copy_is_what_dataclasses_replace_makes(
    copier: Callable[[], Callable[..., Job]], changed: set[str]
) -> None:
    job = Job(
        tenant_id="acme",
        job_id="gen_01TEST",
        task="generate",
        model="sim",
        input={"prompt": "hi"},
        request_hash="0" * 64,
        created_at=1.0,
        updated_at=1.0,
        correlation_id="cor_test",
    )
    snapshot = dataclasses.replace(job)
    given_changes = {name: OTHER[name] for name in changed}

    copy = copier()(job, **given_changes)

    assert copy == dataclasses.replace(job, **given_changes)
    assert type(copy) is Job and copy is not job
    assert all(getattr(copy, name) is getattr(job, name) for name in FIELDS if name not in changed)
    assert all(getattr(copy, name) is OTHER[name] for name in changed)
    assert job == snapshot  # the original is never touched


@pytest.mark.parametrize("copier", COPIES.values(), ids=COPIES.keys())
def test_an_unknown_field_is_refused_as_by_dataclasses_replace(
    copier: Callable[[], Callable[..., Job]], job_factory: Callable[..., Job]
) -> None:
    job = job_factory()
    with pytest.raises(TypeError) as theirs:
        dataclasses.replace(job, status=JobStatus.FAILED, statuss=JobStatus.FAILED)
    with pytest.raises(TypeError) as ours:
        copier()(job, status=JobStatus.FAILED, statuss=JobStatus.FAILED)
    assert str(ours.value) == str(theirs.value)
    assert "unexpected keyword argument 'statuss'" in str(ours.value)


def test_the_copy_is_as_frozen_as_the_original(job_factory: Callable[..., Job]) -> None:
    copy = evolve(job_factory(), fence=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.fence = 3  # type: ignore[misc]


@dataclasses.dataclass(frozen=True)
class _NoSlots:
    a: int


@dataclasses.dataclass(slots=True)
class _NotFrozen:
    a: int


@dataclasses.dataclass(frozen=True, slots=True)
class _PostInit:
    a: int

    def __post_init__(self) -> None:
        pass


@dataclasses.dataclass(frozen=True, slots=True)
class _NotInInit:
    a: int
    b: int = dataclasses.field(default=0, init=False)


@pytest.mark.parametrize(
    ("cls", "why"),
    [
        (_NoSlots, "_NoSlots is not a frozen, slotted dataclass"),
        (_NotFrozen, "_NotFrozen is not a frozen, slotted dataclass"),
        (int, "int is not a frozen, slotted dataclass"),
        (_PostInit, "_PostInit has a __post_init__, which a copy would skip"),
        (_NotInInit, "_NotInInit has a field outside __init__"),
    ],
)
def test_a_class_the_copy_would_get_wrong_is_refused_saying_why(cls: type, why: str) -> None:
    with pytest.raises(TypeError) as refused:
        replacer(cls)
    assert str(refused.value) == why
