"""The curated public API: exactly these names, no accidental exports."""

from __future__ import annotations

import ferryman


def test_exported_names_are_exactly_the_intended_ones() -> None:
    assert sorted(ferryman.__all__) == [
        "AsyncClient",
        "Attempt",
        "BatchProblem",
        "Client",
        "ClientError",
        "Event",
        "Job",
        "JobCancelledError",
        "JobFailedError",
        "JobHistory",
        "JobStatus",
        "Page",
        "SubmitItem",
        "Submitted",
        "UnreachableError",
        "WaitTimeoutError",
    ]
    for name in ferryman.__all__:
        module = getattr(ferryman, name).__module__
        assert module.startswith("ferryman.client.") or module == "ferryman.core.job", name


def test_package_is_typed() -> None:
    from importlib.resources import files

    assert files("ferryman").joinpath("py.typed").is_file()
