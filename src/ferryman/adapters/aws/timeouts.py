"""The timeouts an SQS + Lambda deployment must keep in agreement, as pure rules.

``ferryman doctor`` on an ``aws://`` URL reads the live queue, its redrive policy and
the Lambda event source mapping that consumes it (adapters/aws/live.py) and runs every
rule here on what it read and on the worker's settings. Each rule returns a Finding:
the rule, the values it compared and, when broken, the value to change and where
(a FERRYMAN_* variable, or a parameter of deploy/aws/template.yaml). Nothing here
calls AWS or reads Settings, so each rule is tested on plain values.

Why each rule matters:

- The queue's VisibilityTimeout >= 6 x the function's timeout (AWS's guidance for SQS
  event sources: the mapping retries a throttled batch inside that time) plus the
  mapping's batching window (its messages are already received, their visibility
  running, while it gathers the batch). CloudFormation cannot multiply, so the
  template carries it as its own parameter and this rule is where it is held.
- An attempt must fit in SQS's 12-hour visibility ceiling, counted from the first
  receipt, and, for the Lambda worker, in the function's timeout: an invocation killed
  at its timeout loses the attempt it was running.
- The redrive policy's maxReceiveCount is ferryman's max receives: with a smaller one
  SQS dead-letters a job ferryman would still retry; with a larger, ferryman fails the
  job first and the message keeps coming back.
- The DLQ keeps messages at least as long as the queue: a dead-lettered message keeps
  its first enqueue time, so a shorter DLQ retention deletes it before anyone looks.
- ReportBatchItemFailures, or one failed record returns the whole batch to the queue.
- Long polling (ReceiveMessageWaitTimeSeconds > 0): a short poll pays a request for
  every empty receive and may miss messages on a sampled subset of servers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# SQS: a message's visibility can be extended to at most 12 hours from its receipt.
SQS_VISIBILITY_CEILING_SECONDS = 12 * 3600
# AWS's guidance for an SQS event source: visibility >= 6 x the function's timeout.
LAMBDA_VISIBILITY_FACTOR = 6

TEMPLATE = "deploy/aws/template.yaml"


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule as the live setup holds it; ``fix`` names the value to change."""

    rule: str
    value: str
    ok: bool
    fix: str = ""
    # Holds, but worth knowing (a batching window): shown, never a failure.
    note: bool = False


@dataclass(frozen=True, slots=True)
class QueueObserved:
    """The job queue's attributes as SQS reports them, and its dead-letter queue's."""

    name: str
    visibility_timeout_seconds: int
    retention_seconds: int
    receive_wait_seconds: int
    # From the RedrivePolicy; None when the queue has none.
    max_receive_count: int | None
    dlq_arn: str | None
    # None when there is no DLQ to read.
    dlq_retention_seconds: int | None


@dataclass(frozen=True, slots=True)
class MappingObserved:
    """A Lambda event source mapping on the job queue, and its function's timeout."""

    function_name: str
    function_timeout_seconds: int
    batch_size: int
    batching_window_seconds: int
    report_batch_item_failures: bool
    maximum_concurrency: int | None
    state: str


@dataclass(frozen=True, slots=True)
class WorkerTimeouts:
    """The worker settings the rules compare against (from Settings, in cli/doctor.py)."""

    attempt_timeout_seconds: float
    heartbeat_seconds: float
    visibility_timeout_seconds: float
    max_receives: int
    # How many of a batch's records the Lambda handler runs at once.
    concurrency: int
    # What the Lambda handler adds to an attempt's timeout before it starts one (the
    # outcome's writes ridden through a brief outage, and its margin): it starts none
    # its invocation's time left cannot cover (ferryman.aws_lambda.batch).
    handler_margin_seconds: float

    @property
    def longest_attempt_seconds(self) -> float:
        """From receipt to a durable outcome: the attempt's own timeout, then one
        heartbeat interval for its outcome's writes, during which the message stays
        hidden by the beat before (the lease's margin over the attempt)."""
        return self.attempt_timeout_seconds + self.heartbeat_seconds


def _finding(rule: str, value: str, ok: bool, fix: str) -> Finding:
    return Finding(rule=rule, value=value, ok=ok, fix="" if ok else fix)


def _seconds(value: float) -> str:
    return f"{value:g}s"


# The queue's own rules.


def queue_long_polls(queue: QueueObserved) -> Finding:
    return _finding(
        "queue ReceiveMessageWaitTimeSeconds > 0 (long polling)",
        _seconds(queue.receive_wait_seconds),
        queue.receive_wait_seconds > 0,
        f"set {queue.name}'s ReceiveMessageWaitTimeSeconds to 20",
    )


def redrive_matches_max_receives(queue: QueueObserved, worker: WorkerTimeouts) -> Finding:
    rule = "queue redrive maxReceiveCount == max receives"
    if queue.max_receive_count is None:
        return _finding(
            rule,
            "no redrive policy",
            False,
            f"give {queue.name} a RedrivePolicy to its DLQ with maxReceiveCount "
            f"{worker.max_receives} (`ferryman migrate` makes one on a new queue)",
        )
    return _finding(
        rule,
        f"{queue.max_receive_count} == {worker.max_receives}",
        queue.max_receive_count == worker.max_receives,
        f"set {queue.name}'s maxReceiveCount to {worker.max_receives} (MaxReceiveCount in "
        f"{TEMPLATE}), or FERRYMAN_MAX_RECEIVES to {queue.max_receive_count}",
    )


def dlq_retention_covers_queue(queue: QueueObserved) -> Finding:
    rule = "DLQ MessageRetentionPeriod >= queue's"
    if queue.dlq_retention_seconds is None:
        return _finding(rule, "no DLQ read", False, f"give {queue.name} a dead-letter queue")
    return _finding(
        rule,
        f"{_seconds(queue.dlq_retention_seconds)} >= {_seconds(queue.retention_seconds)}",
        queue.dlq_retention_seconds >= queue.retention_seconds,
        f"set the DLQ's MessageRetentionPeriod to {queue.retention_seconds} or more "
        "(a dead-lettered message keeps its first enqueue time)",
    )


# The worker's settings against SQS's limits.


def attempt_within_sqs_ceiling(worker: WorkerTimeouts) -> Finding:
    longest = worker.longest_attempt_seconds
    room = SQS_VISIBILITY_CEILING_SECONDS - worker.heartbeat_seconds
    return _finding(
        "longest attempt < 12 h (SQS visibility ceiling)",
        f"{_seconds(longest)} < {_seconds(SQS_VISIBILITY_CEILING_SECONDS)}",
        longest < SQS_VISIBILITY_CEILING_SECONDS,
        f"lower FERRYMAN_ATTEMPT_TIMEOUT_SECONDS below {room:g}",
    )


def visibility_setting_within_ceiling(worker: WorkerTimeouts) -> Finding:
    """SQS refuses a ChangeMessageVisibility above 12 h: every heartbeat would fail."""
    return _finding(
        "FERRYMAN_VISIBILITY_TIMEOUT_SECONDS <= 12 h",
        f"{_seconds(worker.visibility_timeout_seconds)} <= "
        f"{_seconds(SQS_VISIBILITY_CEILING_SECONDS)}",
        worker.visibility_timeout_seconds <= SQS_VISIBILITY_CEILING_SECONDS,
        f"lower FERRYMAN_VISIBILITY_TIMEOUT_SECONDS to {SQS_VISIBILITY_CEILING_SECONDS} or less",
    )


# The Lambda worker's rules: one event source mapping on the job queue.


def visibility_covers_function(queue: QueueObserved, mapping: MappingObserved) -> Finding:
    needed = (
        LAMBDA_VISIBILITY_FACTOR * mapping.function_timeout_seconds
        + mapping.batching_window_seconds
    )
    window = (
        f" + {mapping.batching_window_seconds}s window" if mapping.batching_window_seconds else ""
    )
    shortest_timeout = max(
        1,
        (queue.visibility_timeout_seconds - mapping.batching_window_seconds)
        // LAMBDA_VISIBILITY_FACTOR,
    )
    return _finding(
        f"queue VisibilityTimeout >= 6 x {mapping.function_name} timeout",
        f"{queue.visibility_timeout_seconds}s >= 6 x {mapping.function_timeout_seconds}s{window}",
        queue.visibility_timeout_seconds >= needed,
        f"set {queue.name}'s VisibilityTimeout to {needed} (QueueVisibilityTimeout in "
        f"{TEMPLATE}), or {mapping.function_name}'s Timeout to {shortest_timeout} or less",
    )


def attempt_within_function(worker: WorkerTimeouts, mapping: MappingObserved) -> Finding:
    needed = worker.attempt_timeout_seconds + worker.handler_margin_seconds
    return _finding(
        f"attempt timeout + {worker.handler_margin_seconds:g}s < {mapping.function_name} timeout",
        f"{_seconds(needed)} < {mapping.function_timeout_seconds}s",
        needed < mapping.function_timeout_seconds,
        f"raise {mapping.function_name}'s Timeout to {math.floor(needed) + 1} (FunctionTimeout "
        f"in {TEMPLATE}), or lower FERRYMAN_ATTEMPT_TIMEOUT_SECONDS below "
        f"{mapping.function_timeout_seconds - needed + worker.attempt_timeout_seconds:g}",
    )


def batch_fits_function(worker: WorkerTimeouts, mapping: MappingObserved) -> Finding:
    """The handler runs ``concurrency`` records at once: a batch larger than that runs
    in rounds, and its worst case is every round taking the longest attempt."""
    rounds = math.ceil(mapping.batch_size / worker.concurrency)
    worst = rounds * (worker.attempt_timeout_seconds + worker.handler_margin_seconds)
    return _finding(
        f"worst batch ({mapping.batch_size} records) < {mapping.function_name} timeout",
        f"{rounds} round(s): {_seconds(worst)} < {mapping.function_timeout_seconds}s",
        worst < mapping.function_timeout_seconds,
        f"set the mapping's BatchSize to {worker.concurrency} or less (BatchSize in "
        f"{TEMPLATE}), or raise FERRYMAN_WORKER_CONCURRENCY to {mapping.batch_size}",
    )


def mapping_reports_item_failures(mapping: MappingObserved) -> Finding:
    return _finding(
        "event source mapping FunctionResponseTypes has ReportBatchItemFailures",
        "yes" if mapping.report_batch_item_failures else "no",
        mapping.report_batch_item_failures,
        f"add ReportBatchItemFailures to {mapping.function_name}'s mapping's "
        "FunctionResponseTypes (one failed record otherwise retries the whole batch)",
    )


def batching_window_noted(mapping: MappingObserved) -> Finding:
    """A window delays every job by up to its length when traffic is light: noted."""
    window = mapping.batching_window_seconds
    return Finding(
        rule="event source mapping MaximumBatchingWindowInSeconds",
        value=_seconds(window),
        ok=True,
        note=window > 0,
        fix=f"a job may wait up to {window}s for its batch to fill; 0 starts it at once"
        if window > 0
        else "",
    )


def queue_findings(queue: QueueObserved, worker: WorkerTimeouts) -> list[Finding]:
    """The rules every AWS deployment keeps, whatever runs the worker."""
    return [
        queue_long_polls(queue),
        redrive_matches_max_receives(queue, worker),
        dlq_retention_covers_queue(queue),
        attempt_within_sqs_ceiling(worker),
        visibility_setting_within_ceiling(worker),
    ]


def mapping_findings(
    queue: QueueObserved, mapping: MappingObserved, worker: WorkerTimeouts
) -> list[Finding]:
    """The rules of one Lambda event source mapping on the job queue."""
    return [
        visibility_covers_function(queue, mapping),
        attempt_within_function(worker, mapping),
        batch_fits_function(worker, mapping),
        mapping_reports_item_failures(mapping),
        batching_window_noted(mapping),
    ]


def findings(
    queue: QueueObserved, mappings: list[MappingObserved], worker: WorkerTimeouts
) -> list[Finding]:
    """Every rule, in order: the queue's, then each mapping's."""
    found = queue_findings(queue, worker)
    for mapping in mappings:
        found.extend(mapping_findings(queue, mapping, worker))
    return found
