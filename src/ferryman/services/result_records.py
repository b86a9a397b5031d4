"""What a kept result is: the key an attempt's output is stored under, and its bytes."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import orjson

from ferryman.core.results import result_key

if TYPE_CHECKING:
    from ferryman.core.job import Job


# orjson refuses what json encodes differently: dataclasses, datetimes and subclasses of
# str, int, dict and list go to the stdlib's encoder, as before.
_ORJSON_AS_STDLIB = (
    orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def result_json(output: dict[str, Any]) -> bytes:
    """An output as it is stored: compact JSON in UTF-8, non-ASCII as itself.

    orjson writes it (a fraction of the stdlib's cost) wherever it writes the same
    JSON: the same text for every string, the same values (a float may be written in
    another form of the same number, 1e-7 for 1e-07). What orjson refuses (an integer
    past 64 bits, a lone surrogate, a key that is not a string) or may have turned into
    null (a float that is not finite) is encoded by the stdlib as before, so it fails,
    or is written, exactly as it was.
    """
    try:
        data = orjson.dumps(output, option=_ORJSON_AS_STDLIB)
    except orjson.JSONEncodeError:
        pass
    else:
        if b"null" not in data:
            return data
    return json.dumps(output, separators=(",", ":"), ensure_ascii=False).encode()


def result_record(job: Job, attempt_id: str, output: dict[str, Any] | None) -> tuple[str, bytes]:
    """The key and bytes an attempt's output is kept under. Attempt-specific, so a late
    attempt can never overwrite the published result."""
    if output is None:
        raise ValueError("an attempt without an output has no result to keep")
    return result_key(job.tenant_id, job.job_id, attempt_id), result_json(output)
