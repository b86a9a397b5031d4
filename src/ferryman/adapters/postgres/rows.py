"""What PostgreSQL needs beyond the shared row layout (adapters/job_rows.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ferryman.adapters import job_rows

if TYPE_CHECKING:
    from ferryman.core.job import AttemptReport


def report_params(report: AttemptReport) -> dict[str, Any]:
    """The shared attempt columns, with raw output that PostgreSQL text can hold."""
    params = job_rows.report_params(report)
    params["raw_output"] = _text(report.raw_output)
    return params


def _text(value: str | None) -> str | None:
    """PostgreSQL text cannot hold NUL, which a model's raw answer may: it is kept as
    U+FFFD (raw output is kept for debugging, never served as the result)."""
    return None if value is None else value.replace("\x00", "\ufffd")
