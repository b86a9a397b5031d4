"""What a worker is built from: the parts every step shares, and the worker's settings.

Wiring builds these once (``wiring.Runtime.new_worker``) and composes the worker from
them: the attempt runner, the delivery handler and the receive loop each take the
parts and only the settings of their own, so no constructor grows with every knob.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ferryman.core.lease import LeasePolicy
from ferryman.core.retry import RetryPolicy

if TYPE_CHECKING:
    from ferryman.core.clock import Clock
    from ferryman.ports.control import ControlStore
    from ferryman.ports.queue import JobQueue
    from ferryman.services.catalog import ModelCatalog
    from ferryman.services.ledger import JobLedger
    from ferryman.services.observers import Observers
    from ferryman.services.probes import ProbeSchedule
    from ferryman.services.results import ResultWriter
    from ferryman.tasks import TaskRegistry

# As FERRYMAN_RECEIVE_LINGER_SECONDS's default (config.py; a test holds them equal).
DEFAULT_RECEIVE_LINGER_SECONDS = 0.005


@dataclass(frozen=True, slots=True)
class WorkerParts:
    """The services and stores every step of a worker reads and writes."""

    store: JobLedger
    queue: JobQueue
    results: ResultWriter
    control: ControlStore
    catalog: ModelCatalog
    tasks: TaskRegistry
    clock: Clock
    # Everything that watches the worker's jobs (the ledger's own chain, usually).
    observers: Observers


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """How one worker process runs. Defaults are Settings' (tests/unit/test_defaults_agree.py)."""

    worker_id: str
    concurrency: int
    lease: LeasePolicy = field(default_factory=LeasePolicy)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # Deliveries of one job that may end without an outcome before it is dead-lettered.
    max_receives: int = 10
    # No tenant holds more than this share of the worker's slots.
    tenant_max_share: float = 0.5
    shutdown_grace_seconds: float = 30.0
    receive_wait_seconds: float = 1.0
    receive_linger_seconds: float = DEFAULT_RECEIVE_LINGER_SECONDS
    cancel_check_seconds: float = 0.5
    # When a provider paused automatically is probed again; None: ProbeSchedule's defaults.
    probe_schedule: ProbeSchedule | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not 0 < self.tenant_max_share <= 1:
            raise ValueError("tenant_max_share must be within (0, 1]")
        if self.receive_linger_seconds < 0:
            raise ValueError("receive_linger_seconds must be at least 0")
