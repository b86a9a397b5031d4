from __future__ import annotations

import re
import time

from ulid import ULID

from ferryman.core.ids import new_attempt_id, new_correlation_id, new_job_id, new_worker_id


def test_prefixes_say_what_an_id_names() -> None:
    assert re.fullmatch(r"gen_[0-9A-HJKMNP-TV-Z]{26}", new_job_id())
    assert re.fullmatch(r"att_[0-9A-HJKMNP-TV-Z]{26}", new_attempt_id())
    assert re.fullmatch(r"cor_[0-9a-f]{24}", new_correlation_id())
    assert re.fullmatch(r"host-1:4242:[0-9a-f]{6}", new_worker_id("host-1", 4242))


def test_ids_are_unique() -> None:
    for make in (new_job_id, new_attempt_id, new_correlation_id):
        ids = [make() for _ in range(5_000)]
        assert len(set(ids)) == len(ids)
    assert new_worker_id("h", 1) != new_worker_id("h", 1)


def test_job_ids_sort_in_creation_order() -> None:
    # Within one millisecond too: the ULID generator is monotonic.
    ids = [new_job_id() for _ in range(5_000)]
    assert ids == sorted(ids)


def test_job_ids_carry_their_creation_time() -> None:
    ulid = ULID.from_str(new_job_id().removeprefix("gen_"))
    assert abs(ulid.timestamp - time.time()) < 5
