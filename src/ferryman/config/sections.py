"""The sections of Settings: one frozen table per engine and per concern.

Each is a ``[NAME]`` table of ferryman.toml and a ``FERRYMAN_NAME__FIELD`` variable
(``[worker] concurrency = 8``, ``FERRYMAN_WORKER__CONCURRENCY=8``). The flat names
each knob had before sections (``worker_concurrency``, ``FERRYMAN_WORKER_CONCURRENCY``)
are still read: FLAT_NAMES maps each to its place. An engine to come (aws) adds its
own section here and its flat names, if it had any, to FLAT_NAMES.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ferryman.core.webhooks import DEFAULT_RETRY_SCHEDULE, parse_schedule

_LOG_LEVELS = frozenset({"CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG"})


class _Section(BaseModel):
    # Printed as it is, a ValidationError would show values (keys, URLs with passwords).
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)


class SqliteSettings(_Section):
    """``[sqlite]``: the SQLite engine."""

    synchronous: Literal["FULL", "NORMAL"] = "FULL"

    @field_validator("synchronous", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class PostgresSettings(_Section):
    """``[postgres]``: each process's connection pool (plus one listening connection)."""

    pool_min_size: int = Field(default=1, ge=1)
    pool_max_size: int = Field(default=10, ge=1)
    connect_timeout_seconds: float = Field(default=5.0, gt=0)

    @model_validator(mode="after")
    def _pool_bounds_in_order(self) -> PostgresSettings:
        # Named by the flat names, as before sections: the names deployments know.
        if self.pool_min_size > self.pool_max_size:
            raise ValueError(
                f"postgres_pool_min_size ({self.pool_min_size}) is above "
                f"postgres_pool_max_size ({self.pool_max_size})"
            )
        return self


class ResultsSettings(_Section):
    """``[results]``: the result store (where it is: ``results_url``, top level)."""

    # With file:// results, a worker starts no new model call while the directory's
    # filesystem has less free space than this (0: no floor): an output already paid
    # for must have somewhere to go. adapters/files/store.py has the same default.
    min_free_bytes: int = Field(default=16 * 1024 * 1024, ge=0)


class HttpSettings(_Section):
    """``[http]``: where the API listens and what it accepts."""

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    idempotency_retention_seconds: float = Field(default=86400.0, gt=0)
    max_body_bytes: int = Field(default=262144, ge=1)
    # The body of POST /v1/generations/batch (up to 1,000 jobs), read whole in memory.
    max_batch_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1)
    # A list page stops adding jobs once their results add up to this many bytes.
    list_max_bytes: int = Field(default=1_048_576, ge=1024)
    # Slow or silent clients: how long a request's headers and body may take to arrive,
    # how long an idle keep-alive connection stays open, and how many connections at once.
    header_timeout_seconds: float = Field(default=10.0, gt=0)
    body_timeout_seconds: float = Field(default=30.0, gt=0)
    keepalive_timeout_seconds: float = Field(default=5.0, gt=0)
    max_connections: int = Field(default=1024, ge=1)
    # Connections whose request head has taken over a second are counted apart from
    # max_connections, at most this many in all and from one client address; past
    # either, the oldest of them is closed (http/slow_heads.py).
    max_slow_heads: int = Field(default=256, ge=1)
    max_slow_heads_per_client: int = Field(default=32, ge=1)
    # Per-tenant series on the unauthenticated /metrics would name every tenant.
    metrics_tenant_labels: bool = False


class ClientSettings(_Section):
    """``[client]``: what the CLI's client commands talk to, and with."""

    url: str = "http://127.0.0.1:8000"
    api_key: str | None = Field(default=None, repr=False)


class TenantSettings(_Section):
    """``[tenants]``: tenants sharing API processes, workers and storage."""

    # Submissions (and cancels) per second per tenant (0 turns the limit off), a batch
    # counting its items, with bursts of ``burst``; reads (get, list, events) have
    # their own budget. The default is about what one API process can accept, so it
    # never holds back a producer the process could serve (docs/operations.md).
    rate_per_second: float = Field(default=5000.0, ge=0)
    burst: int = Field(default=100, ge=1)
    read_rate_per_second: float = Field(default=200.0, ge=0)
    read_burst: int = Field(default=400, ge=1)
    # The share of one worker process's slots that one tenant may hold at once.
    max_share: float = Field(default=0.5, gt=0, le=1)
    # Unfinished jobs one tenant may have (0: no limit); over it, submits get 429.
    max_backlog: int = Field(default=100_000, ge=0)
    # Jobs one tenant may have stored, finished or not (0: no limit); over it, 507.
    max_stored_jobs: int = Field(default=0, ge=0)


class WorkerSettings(_Section):
    """``[worker]``: the worker and its timeouts (docs/architecture.md, Timeouts that
    must agree)."""

    concurrency: int = Field(default=64, ge=1)
    lease_seconds: float = Field(default=60.0, gt=0)
    visibility_timeout_seconds: float = Field(default=60.0, gt=0)
    heartbeat_interval_seconds: float | None = Field(default=None, gt=0)
    # A provider's client-side timeout, unless its [providers.NAME] table gives one.
    provider_timeout_seconds: float = Field(default=30.0, gt=0)
    attempt_timeout_seconds: float = Field(default=45.0, gt=0)
    shutdown_grace_seconds: float = Field(default=30.0, ge=0)
    receive_wait_seconds: float = Field(default=1.0, ge=0)
    # After a receive that found some work but not a full batch, and left nothing
    # visible, the next one waits this long so jobs arriving one at a time share a
    # receive (0 turns it off). A job arriving alone later than that is taken at once.
    # At most 0.5 s: more would be a mistyped milliseconds figure.
    receive_linger_seconds: float = Field(default=0.005, ge=0, le=0.5)
    # How often a worker looks for cancel requests on the calls it runs.
    cancel_check_seconds: float = Field(default=0.5, gt=0)
    # A provider paused automatically (it refused our credentials, and so did a probe
    # of it) is probed again this long after the pause, then each wait twice the last,
    # up to the maximum; it is resumed by itself once a probe passes.
    provider_probe_initial_seconds: float = Field(default=30.0, gt=0)
    provider_probe_max_seconds: float = Field(default=600.0, gt=0)

    @model_validator(mode="after")
    def _probe_waits_in_order(self) -> WorkerSettings:
        if self.provider_probe_initial_seconds > self.provider_probe_max_seconds:
            raise ValueError(
                f"provider_probe_initial_seconds ({self.provider_probe_initial_seconds:g}) "
                f"is above provider_probe_max_seconds ({self.provider_probe_max_seconds:g})"
            )
        return self


class RetrySettings(_Section):
    """``[retries]``: budgets and backoff."""

    max_attempts: int = Field(default=5, ge=1)
    max_receives: int = Field(default=10, ge=1)
    max_invalid_output_attempts: int = Field(default=2, ge=1)
    initial_interval_seconds: float = Field(default=1.0, ge=0)
    backoff_coefficient: float = Field(default=2.0, ge=1)
    maximum_interval_seconds: float = Field(default=300.0, ge=0)


class SweeperSettings(_Section):
    """``[sweeper]``: the sweeper, and the retention of finished jobs it purges."""

    interval_seconds: float = Field(default=5.0, gt=0)
    # Unset: visibility timeout + lease (Settings.stalled_seconds).
    stalled_after_seconds: float | None = Field(default=None, gt=0)
    # Finished jobs older than this are purged (unset: kept until `ferryman purge`).
    retention_seconds: float | None = Field(default=None, gt=0)


class WebhookSettings(_Section):
    """``[webhooks]``: completion webhooks (docs/getting-results.md)."""

    # Hosts (``host`` or ``host:port``, comma-separated) that may be called over http
    # and at private addresses: internal receivers and tests. Every other webhook_url
    # must be https to a public address.
    allowed_hosts: str = ""
    # Seconds from a failed attempt to the next, one per retry (core/webhooks.py).
    retry_schedule: str = ",".join(f"{s:g}" for s in DEFAULT_RETRY_SCHEDULE)

    @field_validator("allowed_hosts", "retry_schedule", mode="before")
    @classmethod
    def _list_as_text(cls, value: Any) -> Any:
        # ferryman.toml may give a list; the variable gives comma-separated text.
        if isinstance(value, list | tuple):
            return ",".join(str(item) for item in value)
        return value

    @field_validator("retry_schedule")
    @classmethod
    def _parsable_schedule(cls, value: str) -> str:
        parse_schedule(value)  # raises ValueError with the reason
        return value

    @property
    def schedule(self) -> tuple[float, ...]:
        return parse_schedule(self.retry_schedule)


class SimSettings(_Section):
    """``[sim]``: the simulated model."""

    # May a job's input script it (latency, failures)? Off by default: a script holds
    # a worker's slots as long as it asks, so only test and demo deployments (the
    # tutorial, the test suites) turn it on.
    scripts: bool = False


class LogSettings(_Section):
    """``[log]``: logs, on stderr; never prompts or outputs."""

    level: str = "INFO"
    # One JSON object per line instead of text (``json`` would shadow BaseModel.json).
    json_lines: bool = False

    @field_validator("level", mode="before")
    @classmethod
    def _known_level(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.upper()
            if value not in _LOG_LEVELS:
                raise ValueError(f"must be one of {', '.join(sorted(_LOG_LEVELS))}")
        return value


# Each section by its name in Settings (its TOML table, its variables' middle part).
SECTIONS: dict[str, type[_Section]] = {
    "sqlite": SqliteSettings,
    "postgres": PostgresSettings,
    "results": ResultsSettings,
    "http": HttpSettings,
    "client": ClientSettings,
    "tenants": TenantSettings,
    "worker": WorkerSettings,
    "retries": RetrySettings,
    "sweeper": SweeperSettings,
    "sim": SimSettings,
    "webhooks": WebhookSettings,
    "log": LogSettings,
}

# The flat name each knob had before sections (a TOML key, FERRYMAN_ + it upper-cased,
# a keyword of Settings) -> (section, field). Deployments set these; they stay read.
# The webhook knobs came after sections but are named flat too, as the variables users
# are told about (FERRYMAN_WEBHOOK_ALLOWED_HOSTS, FERRYMAN_WEBHOOK_RETRY_SCHEDULE).
FLAT_NAMES: dict[str, tuple[str, str]] = {
    "sqlite_synchronous": ("sqlite", "synchronous"),
    "postgres_pool_min_size": ("postgres", "pool_min_size"),
    "postgres_pool_max_size": ("postgres", "pool_max_size"),
    "postgres_connect_timeout_seconds": ("postgres", "connect_timeout_seconds"),
    "results_min_free_bytes": ("results", "min_free_bytes"),
    "host": ("http", "host"),
    "port": ("http", "port"),
    "idempotency_retention_seconds": ("http", "idempotency_retention_seconds"),
    "max_body_bytes": ("http", "max_body_bytes"),
    "max_batch_body_bytes": ("http", "max_batch_body_bytes"),
    "list_max_bytes": ("http", "list_max_bytes"),
    "header_timeout_seconds": ("http", "header_timeout_seconds"),
    "body_timeout_seconds": ("http", "body_timeout_seconds"),
    "keepalive_timeout_seconds": ("http", "keepalive_timeout_seconds"),
    "max_connections": ("http", "max_connections"),
    "max_slow_heads": ("http", "max_slow_heads"),
    "max_slow_heads_per_client": ("http", "max_slow_heads_per_client"),
    "metrics_tenant_labels": ("http", "metrics_tenant_labels"),
    "url": ("client", "url"),
    "api_key": ("client", "api_key"),
    "tenant_rate_per_second": ("tenants", "rate_per_second"),
    "tenant_burst": ("tenants", "burst"),
    "tenant_read_rate_per_second": ("tenants", "read_rate_per_second"),
    "tenant_read_burst": ("tenants", "read_burst"),
    "tenant_max_share": ("tenants", "max_share"),
    "tenant_max_backlog": ("tenants", "max_backlog"),
    "tenant_max_stored_jobs": ("tenants", "max_stored_jobs"),
    "worker_concurrency": ("worker", "concurrency"),
    "lease_seconds": ("worker", "lease_seconds"),
    "visibility_timeout_seconds": ("worker", "visibility_timeout_seconds"),
    "heartbeat_interval_seconds": ("worker", "heartbeat_interval_seconds"),
    "provider_timeout_seconds": ("worker", "provider_timeout_seconds"),
    "attempt_timeout_seconds": ("worker", "attempt_timeout_seconds"),
    "shutdown_grace_seconds": ("worker", "shutdown_grace_seconds"),
    "receive_wait_seconds": ("worker", "receive_wait_seconds"),
    "receive_linger_seconds": ("worker", "receive_linger_seconds"),
    "cancel_check_seconds": ("worker", "cancel_check_seconds"),
    "provider_probe_initial_seconds": ("worker", "provider_probe_initial_seconds"),
    "provider_probe_max_seconds": ("worker", "provider_probe_max_seconds"),
    "max_attempts": ("retries", "max_attempts"),
    "max_receives": ("retries", "max_receives"),
    "max_invalid_output_attempts": ("retries", "max_invalid_output_attempts"),
    "retry_initial_interval_seconds": ("retries", "initial_interval_seconds"),
    "retry_backoff_coefficient": ("retries", "backoff_coefficient"),
    "retry_maximum_interval_seconds": ("retries", "maximum_interval_seconds"),
    "sweep_interval_seconds": ("sweeper", "interval_seconds"),
    "stalled_after_seconds": ("sweeper", "stalled_after_seconds"),
    "retention_seconds": ("sweeper", "retention_seconds"),
    "sim_scripts": ("sim", "scripts"),
    "webhook_allowed_hosts": ("webhooks", "allowed_hosts"),
    "webhook_retry_schedule": ("webhooks", "retry_schedule"),
    "log_level": ("log", "level"),
    "log_json": ("log", "json_lines"),
}
