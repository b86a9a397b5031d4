"""The AWS timeout rules (adapters/aws/timeouts.py), each on plain values: holds, is
broken, and when broken names the value to change."""

from __future__ import annotations

from typing import Any

import pytest

from ferryman.adapters.aws import timeouts as t
from ferryman.adapters.aws.timeouts import MappingObserved, QueueObserved, WorkerTimeouts


def queue(**overrides: Any) -> QueueObserved:
    values: dict[str, Any] = {
        "name": "fm-jobs",
        "visibility_timeout_seconds": 900,
        "retention_seconds": 1_209_600,
        "receive_wait_seconds": 20,
        "max_receive_count": 10,
        "dlq_arn": "arn:aws:sqs:us-east-1:123456789012:fm-jobs-dlq",
        "dlq_retention_seconds": 1_209_600,
    }
    return QueueObserved(**{**values, **overrides})


def mapping(**overrides: Any) -> MappingObserved:
    values: dict[str, Any] = {
        "function_name": "fm-worker",
        "function_timeout_seconds": 120,
        "batch_size": 10,
        "batching_window_seconds": 0,
        "report_batch_item_failures": True,
        "maximum_concurrency": 5,
        "state": "Enabled",
    }
    return MappingObserved(**{**values, **overrides})


def worker(**overrides: Any) -> WorkerTimeouts:
    values: dict[str, Any] = {
        "attempt_timeout_seconds": 45.0,
        "heartbeat_seconds": 20.0,
        "visibility_timeout_seconds": 60.0,
        "max_receives": 10,
        "concurrency": 64,
        "handler_margin_seconds": 12.6,
    }
    return WorkerTimeouts(**{**values, **overrides})


def test_the_defaults_hold_every_rule() -> None:
    found = t.findings(queue(), [mapping()], worker())
    assert [f.rule for f in found if not f.ok] == []
    assert not any(f.note for f in found)
    assert len(found) == 10


def test_longest_attempt_is_the_attempt_timeout_plus_one_heartbeat() -> None:
    assert worker().longest_attempt_seconds == 65.0


def test_short_polling_is_broken_and_says_20() -> None:
    assert t.queue_long_polls(queue()).ok
    broken = t.queue_long_polls(queue(receive_wait_seconds=0))
    assert not broken.ok
    assert "ReceiveMessageWaitTimeSeconds to 20" in broken.fix


@pytest.mark.parametrize("count", [3, 11])
def test_a_redrive_count_other_than_max_receives_names_both_values(count: int) -> None:
    broken = t.redrive_matches_max_receives(queue(max_receive_count=count), worker())
    assert not broken.ok
    assert "maxReceiveCount to 10" in broken.fix
    assert f"FERRYMAN_MAX_RECEIVES to {count}" in broken.fix


def test_no_redrive_policy_is_broken() -> None:
    broken = t.redrive_matches_max_receives(queue(max_receive_count=None), worker())
    assert not broken.ok
    assert broken.value == "no redrive policy"
    assert "maxReceiveCount 10" in broken.fix


def test_a_dlq_keeping_messages_shorter_than_the_queue_is_broken() -> None:
    assert t.dlq_retention_covers_queue(queue(dlq_retention_seconds=1_209_600)).ok
    broken = t.dlq_retention_covers_queue(queue(dlq_retention_seconds=345_600))
    assert not broken.ok
    assert "MessageRetentionPeriod to 1209600" in broken.fix


def test_no_dlq_is_broken() -> None:
    broken = t.dlq_retention_covers_queue(queue(dlq_retention_seconds=None, dlq_arn=None))
    assert not broken.ok


def test_an_attempt_over_twelve_hours_is_broken() -> None:
    fits = worker(attempt_timeout_seconds=43_200 - 21, heartbeat_seconds=20)
    assert t.attempt_within_sqs_ceiling(fits).ok
    over = worker(attempt_timeout_seconds=43_200 - 20, heartbeat_seconds=20)
    broken = t.attempt_within_sqs_ceiling(over)
    assert not broken.ok
    assert "FERRYMAN_ATTEMPT_TIMEOUT_SECONDS below 43180" in broken.fix


def test_a_visibility_setting_over_twelve_hours_is_broken() -> None:
    assert t.visibility_setting_within_ceiling(worker(visibility_timeout_seconds=43_200)).ok
    broken = t.visibility_setting_within_ceiling(worker(visibility_timeout_seconds=43_201))
    assert not broken.ok
    assert "43200 or less" in broken.fix


def test_visibility_under_six_function_timeouts_names_both_fixes() -> None:
    assert t.visibility_covers_function(queue(visibility_timeout_seconds=720), mapping()).ok
    broken = t.visibility_covers_function(queue(visibility_timeout_seconds=719), mapping())
    assert not broken.ok
    assert "VisibilityTimeout to 720" in broken.fix
    assert "fm-worker's Timeout to 119 or less" in broken.fix


def test_the_batching_window_adds_to_the_visibility_needed() -> None:
    windowed = mapping(batching_window_seconds=30)
    assert t.visibility_covers_function(queue(visibility_timeout_seconds=750), windowed).ok
    broken = t.visibility_covers_function(queue(visibility_timeout_seconds=749), windowed)
    assert not broken.ok
    assert "VisibilityTimeout to 750" in broken.fix
    assert "+ 30s window" in broken.value


def test_an_attempt_longer_than_the_function_timeout_is_broken() -> None:
    # 45 s attempt + 12.6 s the handler adds (the outcome's writes and its margin) = 57.6 s.
    assert t.attempt_within_function(worker(), mapping(function_timeout_seconds=58)).ok
    broken = t.attempt_within_function(worker(), mapping(function_timeout_seconds=57))
    assert not broken.ok
    assert "Timeout to 58" in broken.fix
    assert "FERRYMAN_ATTEMPT_TIMEOUT_SECONDS below 44.4" in broken.fix


def test_a_batch_in_rounds_must_fit_the_function_timeout() -> None:
    # Two rounds of 57.6 s (attempt and the handler's margin): 115.2 s.
    small = worker(concurrency=5)
    assert t.batch_fits_function(small, mapping(function_timeout_seconds=116)).ok
    broken = t.batch_fits_function(small, mapping(function_timeout_seconds=115))
    assert not broken.ok
    assert "BatchSize to 5 or less" in broken.fix
    assert "FERRYMAN_WORKER_CONCURRENCY to 10" in broken.fix


def test_a_mapping_without_report_batch_item_failures_is_broken() -> None:
    assert t.mapping_reports_item_failures(mapping()).ok
    broken = t.mapping_reports_item_failures(mapping(report_batch_item_failures=False))
    assert not broken.ok
    assert "ReportBatchItemFailures" in broken.fix


def test_a_batching_window_is_noted_not_failed() -> None:
    assert not t.batching_window_noted(mapping()).note
    noted = t.batching_window_noted(mapping(batching_window_seconds=5))
    assert noted.ok
    assert noted.note
    assert "5s" in noted.fix


def test_no_mapping_checks_only_the_queue_rules() -> None:
    found = t.findings(queue(), [], worker())
    assert len(found) == len(t.queue_findings(queue(), worker()))
    assert not any("timeout" in f.rule and "fm-worker" in f.rule for f in found)


def test_each_mapping_is_checked_on_its_own() -> None:
    slow = mapping(function_name="slow", function_timeout_seconds=30)
    found = t.findings(queue(), [mapping(), slow], worker())
    broken = [f.rule for f in found if not f.ok]
    assert broken == [
        "attempt timeout + 12.6s < slow timeout",
        "worst batch (10 records) < slow timeout",
    ]


def test_a_finding_that_holds_has_no_fix() -> None:
    for finding in t.findings(queue(), [mapping()], worker()):
        assert finding.fix == ""
