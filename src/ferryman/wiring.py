"""Wiring: the one module that reads Settings and builds adapters, providers and services.

``open_runtime(settings)`` opens the engine named by FERRYMAN_DATABASE_URL and
FERRYMAN_RESULTS_URL, builds every service on top of it, and closes the engine on
exit. Entry points (CLI commands, the HTTP app, tests) take what they need from
the Runtime and never import an adapter themselves.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import tempfile
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ferryman.config import SIM, ConfigurationError, task_files
from ferryman.core.clock import SystemClock
from ferryman.core.ids import new_worker_id
from ferryman.core.models import ModelAlias, Prices
from ferryman.engines import (
    DatabaseProbe,
    Engine,
    EngineOptions,
    InvalidUrlError,
    UnsupportedBackendError,
    check_engine_url,
    engine_entry,
    open_engine,
    probe_engine,
)
from ferryman.failpoints import Failpoints
from ferryman.observability import metrics
from ferryman.observability.job_failpoints import FailpointObserver
from ferryman.observability.job_logs import LogObserver
from ferryman.observability.job_metrics import MetricsObserver
from ferryman.provider_kinds import build_provider, factory_for
from ferryman.providers.simulated import SimulatedProvider
from ferryman.result_stores import (
    INLINE_RESULTS,
    OpenResultStore,
    open_result_store,
    results_directory,
)
from ferryman.services.access import ApiKeys
from ferryman.services.attempt import attempt_timeouts
from ferryman.services.catalog import ModelCatalog
from ferryman.services.intake import Intake, TenantQuotas
from ferryman.services.jobs import JobQueries
from ferryman.services.ledger import JobLedger
from ferryman.services.limiter import DEFAULT_START_CONCURRENCY, CallBudget
from ferryman.services.observers import Observers
from ferryman.services.operations import Operations
from ferryman.services.pauses import WaitReasons
from ferryman.services.probes import ProbeSchedule
from ferryman.services.results import ResultWriter
from ferryman.services.retention import DEFAULT_BATCH_SIZE as DEFAULT_PURGE_BATCH_SIZE
from ferryman.services.retention import Retention
from ferryman.services.sweeper import Sweeper
from ferryman.services.usage import UsageReports
from ferryman.services.watch import JobWatcher
from ferryman.services.webhooks import (
    DispatchOptions,
    WebhookDispatcher,
    WebhookKick,
    WebhookSecrets,
)
from ferryman.services.worker import Worker, compose_worker
from ferryman.services.worker_parts import WorkerOptions, WorkerParts
from ferryman.tasks import TaskDefinitionError, builtin_tasks, declared_task, load_task_modules
from ferryman.webhooks.sealing import sealer_from_key
from ferryman.webhooks.sender import HttpWebhookSender
from ferryman.webhooks.signing import new_secret, signature
from ferryman.webhooks.urls import WebhookUrlGuard, parse_allowed_hosts

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from ferryman.config import ProviderSettings, Settings
    from ferryman.core.clock import Clock
    from ferryman.ports.control import ControlStore
    from ferryman.ports.keys import ApiKeyStore
    from ferryman.ports.limits import SharedLimits
    from ferryman.ports.provider import ModelProvider, ModelRequest, ModelResponse
    from ferryman.ports.queue import JobQueue
    from ferryman.ports.results import ResultStore
    from ferryman.ports.webhooks import SecretSealer
    from ferryman.services.attempt import AttemptTimeouts
    from ferryman.services.jobs import JobView
    from ferryman.tasks import TaskRegistry

__all__ = [
    "DatabaseProbe",
    "InvalidUrlError",
    "UnsupportedBackendError",
    "results_directory",
]


def results_url(settings: Settings) -> str:
    """FERRYMAN_RESULTS_URL, or where results go when it is not set: a directory beside
    an embedded database, but the database itself for a server that processes on many
    machines share (a local directory would be one machine's only)."""
    if (
        "results_url" not in settings.model_fields_set
        and engine_entry(settings.database_url).shared
    ):
        return INLINE_RESULTS
    return settings.results_url


def check_urls(settings: Settings) -> None:
    """Raise UnsupportedBackendError or InvalidUrlError before anything is opened."""
    check_engine_url(settings.database_url)
    results_directory(results_url(settings))


def check_results_location(settings: Settings) -> None:
    """Raise ConfigurationError, naming FERRYMAN_RESULTS_URL and the path, unless the
    results directory can be used: an existing directory this process can write in, or
    a path whose nearest existing parent is one (the directory is made there at start).
    It leaves nothing behind, so a process can refuse to start before it makes anything
    (a database). Writing is tried, not inferred from permission bits, which say
    nothing of read-only or special filesystems (nor of root)."""
    directory = results_directory(results_url(settings))
    if directory is None:
        return
    path = Path(directory).resolve()
    existing = path
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        where = "" if existing == path else f" ({existing} is a file)"
        raise _results_error(path, f"not a directory{where}")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".ferryman-probe-", dir=existing))
    except OSError as exc:
        what = "write in it" if existing == path else f"create it in {existing}"
        reason = exc.strerror or type(exc).__name__
        raise _results_error(path, f"this process cannot {what} ({reason})") from None


def _results_error(path: Path, reason: str) -> ConfigurationError:
    return ConfigurationError(f"FERRYMAN_RESULTS_URL names {path}: {reason}")


def engine_options(settings: Settings, *, create: bool = True) -> EngineOptions:
    return EngineOptions(
        max_receives=settings.retries.max_receives,
        create=create,
        sqlite_synchronous=settings.sqlite.synchronous,
        postgres_pool_min_size=settings.postgres.pool_min_size,
        postgres_pool_max_size=max(
            settings.postgres.pool_min_size, settings.postgres.pool_max_size
        ),
        postgres_connect_timeout_seconds=settings.postgres.connect_timeout_seconds,
    )


@dataclass(slots=True)
class Runtime:
    """Everything one process needs, built from Settings over one open engine."""

    settings: Settings
    clock: Clock
    store: JobLedger
    queue: JobQueue
    results: ResultStore
    result_writer: ResultWriter
    keys: ApiKeyStore
    control: ControlStore
    tasks: TaskRegistry
    intake: Intake
    jobs: JobQueries
    operations: Operations
    api_keys: ApiKeys
    usage: UsageReports
    database_path: str
    results_location: str
    catalog: ModelCatalog
    # Per-tenant API budgets shared by every process (PostgreSQL); None: per process.
    shared_limits: SharedLimits | None = None
    # Completion webhooks: signing secrets, the guard on receivers' addresses, and the
    # observer that tells this process's dispatcher of a job it finished.
    webhook_secrets: WebhookSecrets | None = None
    webhook_urls: WebhookUrlGuard | None = None
    webhook_kick: WebhookKick | None = None

    async def prepare_storage(self) -> None:
        """Make the results directory (owner-only) if there is none, so a process that
        serves is ready, and ``doctor`` agrees, before its first result is written.
        ``check_results_location`` has looked before anything was made; a failure here
        (the path changed since) is still one line naming the setting."""
        directory = results_directory(results_url(self.settings))
        if directory is None:
            return
        path = await asyncio.to_thread(Path(directory).resolve)
        try:
            await asyncio.to_thread(path.mkdir, mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise _results_error(path, exc.strerror or type(exc).__name__) from None

    def new_worker(self, concurrency: int | None = None) -> Worker:
        s = self.settings
        parts = WorkerParts(
            store=self.store,
            queue=self.queue,
            results=self.result_writer,
            control=self.control,
            catalog=self.catalog,
            tasks=self.tasks,
            clock=self.clock,
            observers=self.store.observers,
        )
        options = WorkerOptions(
            worker_id=new_worker_id(socket.gethostname(), os.getpid()),
            concurrency=concurrency or s.worker.concurrency,
            lease=s.lease_policy(),
            retry=s.retry_policy(),
            max_receives=s.retries.max_receives,
            tenant_max_share=s.tenants.max_share,
            shutdown_grace_seconds=s.worker.shutdown_grace_seconds,
            receive_wait_seconds=s.worker.receive_wait_seconds,
            receive_linger_seconds=s.worker.receive_linger_seconds,
            cancel_check_seconds=s.worker.cancel_check_seconds,
            probe_schedule=ProbeSchedule(
                initial_seconds=s.worker.provider_probe_initial_seconds,
                maximum_seconds=s.worker.provider_probe_max_seconds,
            ),
        )
        return compose_worker(
            parts,
            options,
            timeouts=worker_timeouts(s),
            budgets=call_budgets(s),
            shared_limits=self.shared_limits,
        )

    def new_retention(self, *, batch_size: int = DEFAULT_PURGE_BATCH_SIZE) -> Retention:
        return Retention(
            store=self.store.store, clock=self.clock, results=self.results, batch_size=batch_size
        )

    def new_webhook_dispatcher(
        self, render: Callable[[str, float, JobView], bytes]
    ) -> WebhookDispatcher:
        """The dispatcher of completion webhooks; ``render`` writes an event's body (the
        HTTP layer's: the job as GET shows it)."""
        assert self.webhook_secrets is not None
        assert self.webhook_urls is not None
        options = DispatchOptions(schedule=self.settings.webhooks.schedule)
        # A connection for every attempt the dispatcher may have in flight: one waiting
        # for a free connection would spend its own timeout waiting.
        sender = HttpWebhookSender(self.webhook_urls, max_connections=options.max_in_flight)
        return WebhookDispatcher(
            store=self.store.store,
            ledger=self.store,
            jobs=self.jobs,
            secrets=self.webhook_secrets,
            sender=sender,
            sign=signature,
            render=render,
            clock=self.clock,
            options=options,
            kick=self.webhook_kick,
        )

    def new_sweeper(self) -> Sweeper:
        return Sweeper(
            store=self.store.store,
            ledger=self.store,
            queue=self.queue,
            clock=self.clock,
            interval_seconds=self.settings.sweeper.interval_seconds,
            stalled_after_seconds=self.settings.stalled_seconds,
            retention=self.new_retention(),
            retention_seconds=self.settings.sweeper.retention_seconds,
        )


def build_catalog(settings: Settings, *, providers_on_first_use: bool = False) -> ModelCatalog:
    """Every configured provider and model alias, and the simulated model as ``sim``
    (provider and alias) unless the configuration names something else so.

    Providers are made now, so a missing key stops the process at start; with
    ``providers_on_first_use`` each is made when first asked to call or check its model
    (for processes that call none)."""
    providers: dict[str, ModelProvider] = {SIM: SimulatedProvider(scripts=settings.sim.scripts)}
    for name, provider in settings.providers.items():
        make = functools.partial(build_provider, name, provider, settings)
        providers[name] = _ProviderOnFirstUse(name, make) if providers_on_first_use else make()
    aliases = {SIM: ModelAlias(name=SIM, provider=SIM, model=SIM)}
    for name, model in settings.models.items():
        aliases[name] = ModelAlias(
            name=name,
            provider=model.provider,
            model=model.model,
            prices=Prices(
                input_per_mtok_usd=model.input_price_per_mtok,
                output_per_mtok_usd=model.output_price_per_mtok,
            ),
            fallbacks=tuple(model.fallbacks),
        )
    return ModelCatalog(aliases=aliases.values(), providers=providers.values())


def build_tasks(settings: Settings) -> TaskRegistry:
    """The built-in tasks, the declared ones ([tasks.NAME] tables, then the files of
    FERRYMAN_TASKS_DIR) and those of the FERRYMAN_TASKS modules. A task that cannot be
    defined, a name defined twice, or a default model that is not configured is a
    ConfigurationError naming the task and where it comes from."""
    declared = [
        (name, table, f"[tasks.{name}] in the configuration")
        for name, table in settings.tasks.items()
    ]
    if settings.tasks_dir is not None:
        declared += [
            (name, table, f"file {settings.tasks_dir}/{name}.toml")
            for name, table in task_files(settings.tasks_dir).items()
        ]
    registry = builtin_tasks()
    try:
        for name, table, origin in declared:
            registry.register(declared_task(name=name, origin=origin, **table.model_dump()))
        for definition in load_task_modules(settings.tasks_module):
            registry.register(definition)
    except TaskDefinitionError as exc:
        raise ConfigurationError(str(exc)) from None
    aliases = {SIM, *settings.models}
    for definition in registry:
        if definition.default_model not in aliases:
            raise ConfigurationError(
                f"task {definition.name!r} ({definition.origin}) defaults to model "
                f"{definition.default_model!r}, which is not configured ([models.NAME]; "
                f"known: {', '.join(sorted(aliases))})"
            )
    return registry


class _ProviderOnFirstUse:
    """A configured provider made when first asked to call or check its model. A process
    that calls none (an operator command) then runs without the provider's key or SDK;
    one that does gets, at its first call, the error it would have had at start."""

    def __init__(self, name: str, make: Callable[[], ModelProvider]) -> None:
        self._name = name
        self._make = make
        self._made: ModelProvider | None = None

    @property
    def name(self) -> str:
        return self._name

    def _provider(self) -> ModelProvider:
        if self._made is None:
            self._made = self._make()
        return self._made

    async def invoke(self, request: ModelRequest, *, timeout_seconds: float) -> ModelResponse:
        return await self._provider().invoke(request, timeout_seconds=timeout_seconds)

    async def check(self) -> None:
        await self._provider().check()

    async def aclose(self) -> None:
        if self._made is not None:
            await self._made.aclose()


def worker_timeouts(settings: Settings) -> AttemptTimeouts:
    """The timeouts of a worker's calls (what bounds one attempt; the Lambda worker
    starts none that its invocation's time left cannot cover)."""
    return attempt_timeouts(
        settings.worker.provider_timeout_seconds,
        attempt_timeout_seconds=settings.worker.attempt_timeout_seconds,
        provider_timeouts=settings.provider_timeouts(),
    )


def call_budgets(settings: Settings) -> dict[str, CallBudget]:
    """Each configured provider's limits, as every worker process applies them."""
    return {
        name: CallBudget(
            max_concurrency=provider.max_concurrency,
            requests_per_minute=provider.requests_per_minute,
            tokens_per_minute=provider.tokens_per_minute,
            start_concurrency=_start_concurrency(name, provider),
        )
        for name, provider in settings.providers.items()
    }


def _start_concurrency(name: str, provider: ProviderSettings) -> int | None:
    """A real provider's window opens at a few calls and doubles each round trip (a
    fresh worker should not open with its whole concurrency of 429s); the sim has no
    limit to find."""
    if provider.start_concurrency is not None:
        return provider.start_concurrency
    if not factory_for(name, provider).has_limits_to_find:
        return None
    return DEFAULT_START_CONCURRENCY


@asynccontextmanager
async def open_runtime(
    settings: Settings,
    *,
    clock: Clock | None = None,
    create: bool = True,
    call_models: bool = True,
) -> AsyncIterator[Runtime]:
    """Open the configured engine, build the services over it, close it on exit.

    What the configuration alone decides (the URLs, the tasks, the model catalog) is
    built first, so a configuration error stops the process before it makes a
    database. ``call_models=False`` is for processes that call no model (operator
    commands): they run without the providers' keys (see ``build_catalog``)."""
    check_urls(settings)
    tasks = build_tasks(settings)
    catalog = build_catalog(settings, providers_on_first_use=not call_models)
    clock = clock or SystemClock()
    try:
        async with (
            open_engine(
                settings.database_url, clock=clock, options=engine_options(settings, create=create)
            ) as engine,
            open_result_store(
                results_url(settings), engine, min_free_bytes=settings.results.min_free_bytes
            ) as results,
        ):
            yield _build(settings, engine, results, clock, tasks=tasks, catalog=catalog)
    finally:
        await catalog.aclose()


def process_observers(failpoints: Failpoints | None = None) -> Observers:
    """What watches a process's jobs: metrics, lifecycle logs and failpoints, in the
    order they are called in (docs/architecture.md, "Adding an observer")."""
    return Observers(
        [MetricsObserver(), LogObserver(), FailpointObserver(failpoints or Failpoints())]
    )


def check_job_size(settings: Settings, engine: Engine) -> None:
    """A job's input and metadata arrive in one request body, so a body limit the
    engine can store whole is a limit on every job: checked once, at start, instead of
    a job refused after it was accepted (DynamoDB: an item holds 400 KB)."""
    limit = engine.store.capabilities.max_job_bytes
    if limit is not None and settings.http.max_body_bytes > limit:
        raise ConfigurationError(
            f"FERRYMAN_MAX_BODY_BYTES={settings.http.max_body_bytes} is more than the "
            f"{engine.name} engine stores in one job ({limit} bytes of input and "
            f"metadata): set it to {limit} or less"
        )


def _build(
    settings: Settings,
    engine: Engine,
    opened_results: OpenResultStore,
    clock: Clock,
    *,
    tasks: TaskRegistry,
    catalog: ModelCatalog,
) -> Runtime:
    metrics.configure(tenant_labels=settings.http.metrics_tenant_labels)
    check_job_size(settings, engine)
    webhook_urls = webhook_guard(settings)
    webhook_secrets = WebhookSecrets(
        store=engine.webhook_secrets,
        sealer=secret_sealer(settings),
        clock=clock,
        new_secret=new_secret,
    )
    webhook_kick = WebhookKick()
    # The writes; readers take engine.store itself.
    observers = process_observers(settings.failpoint_set()).with_observer(webhook_kick)
    store = JobLedger(engine.store, observers=observers)
    queue = engine.queue
    results, results_location = opened_results.store, opened_results.location
    keys = engine.keys
    control = engine.control
    # One per process: its view of whether results can be written is what stops this
    # process's workers taking new calls, and what its /readyz reports.
    result_writer = ResultWriter(results)
    return Runtime(
        settings=settings,
        clock=clock,
        store=store,
        queue=queue,
        results=results,
        result_writer=result_writer,
        keys=keys,
        control=control,
        tasks=tasks,
        catalog=catalog,
        intake=Intake(
            store=engine.store,
            ledger=store,
            queue=queue,
            tasks=tasks,
            control=control,
            clock=clock,
            idempotency_retention_seconds=settings.http.idempotency_retention_seconds,
            catalog=catalog,
            quotas=TenantQuotas(
                max_backlog=settings.tenants.max_backlog,
                max_stored_jobs=settings.tenants.max_stored_jobs,
            ),
            sim_scripts=settings.sim.scripts,
            webhook_urls=webhook_urls,
            webhook_secrets=webhook_secrets,
        ),
        jobs=JobQueries(
            store=engine.store,
            ledger=store,
            results=results,
            clock=clock,
            list_max_bytes=settings.http.list_max_bytes,
            waits=WaitReasons(catalog=catalog, control=control),
            # Clients' waits and streams: its task runs only while someone waits.
            watcher=JobWatcher(store=engine.store),
        ),
        operations=Operations(
            store=engine.store,
            ledger=store,
            queue=queue,
            control=control,
            clock=clock,
            results=result_writer,
        ),
        api_keys=ApiKeys(keys=keys, clock=clock),
        usage=UsageReports(store=engine.store, clock=clock),
        database_path=engine.location,
        results_location=results_location,
        shared_limits=engine.limits,
        webhook_secrets=webhook_secrets,
        webhook_urls=webhook_urls,
        webhook_kick=webhook_kick,
    )


def webhook_guard(settings: Settings) -> WebhookUrlGuard:
    """The SSRF guard, with the hosts the operator allowed; a malformed entry of
    FERRYMAN_WEBHOOK_ALLOWED_HOSTS is a configuration error naming it."""
    try:
        allowed = parse_allowed_hosts(settings.webhooks.allowed_hosts)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None
    return WebhookUrlGuard(allowed)


def secret_sealer(settings: Settings) -> SecretSealer:
    """What seals signing secrets at rest: FERRYMAN_SECRET_KEY's keys, or nothing."""
    key = settings.secret_key
    try:
        return sealer_from_key(None if key is None else key.get_secret_value())
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None


# --- looking without touching: doctor, and commands that must not create a database ---


def results_location(settings: Settings) -> Path | None:
    """The absolute results directory, or None when results are kept in the database."""
    directory = results_directory(results_url(settings))
    return None if directory is None else Path(directory).resolve()


async def probe_database(settings: Settings) -> DatabaseProbe:
    """Look at the configured database without creating, migrating or writing anything."""
    return await probe_engine(settings.database_url)
