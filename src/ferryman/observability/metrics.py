"""Prometheus metrics, defined once for the process.

Labels are bounded sets we control (task, model, tenant, status, failure class):
never anything derived from a prompt or an output. ``/metrics`` needs no key, so by
default no series names a tenant: the ``tenant`` label is empty unless an operator
turns per-tenant series on (FERRYMAN_METRICS_TENANT_LABELS).
"""

from __future__ import annotations

from typing import Any, TypeVar

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

M = TypeVar("M", bound=MetricWrapperBase)

_tenant_labels = False


def configure(*, tenant_labels: bool) -> None:
    """Process-wide, like the registry the metrics live in."""
    global _tenant_labels
    _tenant_labels = tenant_labels


# (metric, its labels as given) -> the labelled child. ``Metric.labels()`` sorts and
# checks its arguments and takes a lock on every call: a few microseconds, several
# times per job on the worker's path. The children are the metric's own (it keeps
# every one it made anyway), so this holds nothing more than the registry does.
_children: dict[tuple[Any, ...], Any] = {}


def child(metric: M, **labels: str) -> M:
    """``metric.labels(**labels)``, looked up once per combination of values."""
    key = (metric, *labels.items())
    found = _children.get(key)
    if found is None:
        found = _children[key] = metric.labels(**labels)
    return found


def tenant_label(tenant_id: str) -> str:
    """The value of a ``tenant`` label: the tenant only where per-tenant series are on."""
    return tenant_id if _tenant_labels else ""


_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

JOBS_ACCEPTED = Counter(
    "ferryman_jobs_accepted_total",
    "Jobs accepted by intake (new jobs, not replays).",
    ["task", "tenant"],
)
IDEMPOTENT_REPLAYS = Counter(
    "ferryman_idempotent_replays_total", "Submissions answered with an existing job.", ["tenant"]
)
JOB_OUTCOMES = Counter(
    "ferryman_job_outcomes_total",
    "Jobs reaching a terminal status, by failure class ('' when none).",
    ["task", "tenant", "status", "failure_class"],
)
INVOCATIONS = Counter(
    "ferryman_model_invocations_total",
    "Model calls started (every one is an attempt).",
    ["task", "model"],
)
RETRIES = Counter(
    "ferryman_retries_scheduled_total", "Retries scheduled, by failure class.", ["failure_class"]
)
THROTTLES = Counter("ferryman_throttles_total", "Model calls answered with throttling.", ["model"])
VALIDATION_FAILURES = Counter(
    "ferryman_output_validation_failures_total",
    "Model outputs that broke the task's schema.",
    ["task"],
)
ATTEMPTS_ENDED = Counter(
    "ferryman_attempts_ended_total",
    "Attempts by how they ended (succeeded, retry, failed, lease_lost, abandoned, cancelled).",
    ["outcome"],
)
DUPLICATE_DELIVERIES = Counter(
    "ferryman_duplicate_deliveries_total", "Messages received for a job already finished."
)
UNKNOWN_PAYLOADS = Counter(
    "ferryman_unknown_payload_versions_total",
    "Messages left for a worker that knows their version.",
)
DEAD_LETTERED = Counter(
    "ferryman_dead_lettered_total", "Jobs failed because their message was dead-lettered."
)
REDISPATCHED = Counter(
    "ferryman_redispatched_total", "Messages re-sent by the sweeper for stalled jobs."
)
IN_FLIGHT = Gauge("ferryman_in_flight", "Model calls in flight in this process.")
QUEUE_DEPTH = Gauge("ferryman_queue_depth", "Messages in the queue.", ["state"])
OLDEST_MESSAGE_AGE = Gauge(
    "ferryman_oldest_message_age_seconds", "Age of the oldest undeleted message."
)
DLQ_DEPTH = Gauge("ferryman_dead_letter_queue_depth", "Messages in the dead-letter queue.")
UNDECODABLE_DEAD_LETTERS = Gauge(
    "ferryman_undecodable_dead_letters",
    "Dead letters whose body no worker can read: no job was failed for them "
    "(ferryman dlq undecodable).",
)
MODEL_LATENCY = Histogram(
    "ferryman_model_latency_seconds", "Model call latency.", ["model"], buckets=_LATENCY_BUCKETS
)
END_TO_END_LATENCY = Histogram(
    "ferryman_end_to_end_latency_seconds",
    "From acceptance to a terminal status.",
    ["task"],
    buckets=_LATENCY_BUCKETS,
)
TOKENS = Counter("ferryman_tokens_total", "Model usage tokens.", ["model", "direction"])
PROVIDER_WINDOW = Gauge(
    "ferryman_provider_window",
    "Calls at once this process allows a (provider, model): the AIMD window.",
    ["provider", "model"],
)
PROVIDER_RATE = Gauge(
    "ferryman_provider_rate",
    "Requests per second this process paces a (provider, model) at, learned from its "
    "throttles (0: not learned, not paced).",
    ["provider", "model"],
)
PROVIDER_COST = Counter(
    "ferryman_model_cost_usd_total",
    "What model calls cost, from the alias's prices, by outcome of the attempt.",
    ["provider", "model", "outcome"],
)
USAGE_UNKNOWN = Counter(
    "ferryman_usage_unknown_total",
    "Model answers that reported no token usage: their tokens and cost are recorded as "
    "unknown (null), never as 0.",
    ["provider", "model"],
)
PROVIDER_PROBES = Counter(
    "ferryman_provider_probes_total",
    "Probes of a provider (its models endpoint) after it refused a call's credentials, "
    "or while it is paused automatically, by result (accepted, refused, unknown).",
    ["provider", "result"],
)
PROVIDER_AUTO_PAUSES = Counter(
    "ferryman_provider_auto_pauses_total",
    "Providers paused automatically: a probe was refused too, or the account was.",
    ["provider"],
)
PROVIDER_AUTO_RESUMES = Counter(
    "ferryman_provider_auto_resumes_total",
    "Automatic provider pauses lifted because a probe passed.",
    ["provider"],
)
ATTEMPT_TOKENS = Counter(
    "ferryman_attempt_tokens_total",
    "Model usage tokens by provider, model and outcome of the attempt.",
    ["provider", "model", "outcome", "direction"],
)
