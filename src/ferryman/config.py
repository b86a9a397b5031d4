"""Settings: every knob of a ferryman process, from FERRYMAN_* variables or a TOML file.

Precedence, highest first: keyword arguments (tests), environment variables, the
TOML file named by FERRYMAN_CONFIG (or ./ferryman.toml when present), defaults.
Only wiring.py, http/ and cli/ read Settings; everything else takes explicit
arguments. Rules that relate several values (provider timeout < lease, ...) are
not enforced here but reported by ``ferryman doctor``, so a questionable setup
still starts and can be diagnosed.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from ferryman.core.errors import FerrymanError
from ferryman.core.lease import LeasePolicy
from ferryman.core.retry import RetryPolicy
from ferryman.failpoints import Failpoints

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pydantic.fields import FieldInfo

ENV_PREFIX = "FERRYMAN_"
CONFIG_ENV = "FERRYMAN_CONFIG"
DEFAULT_CONFIG_FILE = "ferryman.toml"
_LOG_LEVELS = frozenset({"CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG"})
# The value of a setting whose name holds one of these is never echoed back in an error
# message (api_key, api_key_env, database_url, results_url, base_url, ...): it may be,
# or hold, a credential.
_SECRET_NAME_PARTS = ("key", "secret", "token", "password", "url")
# An environment variable's name (POSIX), which is what api_key_env holds.
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# 16 or more letters and digits with no break: how API keys look, and names do not.
_KEY_LIKE_RUN = re.compile(r"[A-Za-z0-9]{16,}")


def may_be_secret(text: str) -> bool:
    """Whether a string may be a credential, so a message must not show it: a run of 16
    or more letters and digits mixing both (OpenAI's, Anthropic's and AWS's keys all
    have one; OPENAI_API_KEY or a path does not), or a URL with a user in it."""
    if "@" in text:
        return True
    return any(
        any(c.isdigit() for c in run) and any(c.isalpha() for c in run)
        for run in _KEY_LIKE_RUN.findall(text)
    )


class ConfigurationError(FerrymanError):
    """The configuration is not valid."""

    code = "invalid_configuration"


def config_file_path() -> Path | None:
    """The TOML file to read: FERRYMAN_CONFIG, else ./ferryman.toml if it exists."""
    named = os.environ.get(CONFIG_ENV)
    if named:
        path = Path(named)
        if not path.is_file():
            raise ConfigurationError(f"{CONFIG_ENV} points to {named}, which is not a file")
        return path
    default = Path(DEFAULT_CONFIG_FILE)
    return default if default.is_file() else None


ProviderKind = Literal["openai", "anthropic", "bedrock", "sim"]
SIM = "sim"


class ProviderSettings(BaseModel):
    """``[providers.NAME]``: one account at one model API."""

    # A ValidationError printed as it is would show the values: keys among them.
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    kind: ProviderKind
    # OpenAI-compatible servers and Anthropic: where the API is (a default per kind).
    base_url: str | None = None
    # The name of the environment variable holding the key; the key itself is never
    # written in a file ferryman reads.
    api_key_env: str | None = None
    # Calls at once to this provider from one worker process (the AIMD window's ceiling).
    max_concurrency: int = Field(default=64, ge=1)
    # Calls at once when a worker starts; the window doubles each round trip from
    # there until the first throttle (slow start). Unset: 8, or for the sim (a test
    # double with no limit to find) max_concurrency.
    start_concurrency: int | None = Field(default=None, ge=1)
    # Optional budgets per worker process; unset, only the AIMD window paces calls.
    requests_per_minute: float | None = Field(default=None, gt=0)
    tokens_per_minute: float | None = Field(default=None, gt=0)
    # This provider's client-side timeout (else FERRYMAN_PROVIDER_TIMEOUT_SECONDS).
    timeout_seconds: float | None = Field(default=None, gt=0)
    # OpenAI-compatible: how to ask for JSON. json_schema (strict structured output)
    # falls back to json_object by itself on a server that lacks it.
    structured_output: Literal["json_schema", "json_object"] = "json_schema"
    # Stream answers, so a long generation shows progress and a stalled one is noticed.
    stream: bool = True
    # Bedrock: the AWS region (else the AWS SDK's own configuration).
    region: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_inline_key(cls, table: Any) -> Any:
        if isinstance(table, dict) and "api_key" in table:
            raise ValueError(
                "api_key: a key is never written in the configuration; put it in an "
                "environment variable and name that variable with api_key_env "
                '(api_key_env = "OPENAI_API_KEY")'
            )
        return table

    @field_validator("api_key_env")
    @classmethod
    def _a_variable_name(cls, value: str | None) -> str | None:
        if value is not None and (not _VARIABLE_NAME.fullmatch(value) or may_be_secret(value)):
            raise ValueError(
                "must be the name of the environment variable holding the key (letters, "
                "digits and _, like OPENAI_API_KEY); this value is not one and may be the "
                "key itself, which is never written in the configuration (it is not shown)"
            )
        return value


class ModelSettings(BaseModel):
    """``[models.ALIAS]``: what a job's ``model`` means."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str = Field(min_length=1)
    model: str = Field(min_length=1)
    # US dollars per million tokens. Not given, a call costs $0; doctor and `ferryman
    # models` flag that, while a price given as 0 (a free, self-hosted model) is not.
    input_price_per_mtok: float = Field(default=0.0, ge=0)
    output_price_per_mtok: float = Field(default=0.0, ge=0)
    # Tried when this one stays throttled past its budget, or the input is too long for it.
    fallbacks: list[str] = Field(default_factory=list)

    def prices_not_given(self) -> list[str]:
        """The price fields given neither in the file nor in the environment."""
        return [name for name in _PRICE_FIELDS if name not in self.model_fields_set]


_PRICE_FIELDS = ("input_price_per_mtok", "output_price_per_mtok")


class TaskSettings(BaseModel):
    """``[tasks.NAME]`` (or ``tasks_dir/NAME.toml``): a task declared without code
    (docs/tasks.md). The schemas and templates are checked when the task is built."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    description: str | None = None
    # Templates: text with {{ input.FIELD }} placeholders and nothing else.
    prompt: str = Field(min_length=1)
    system: str | None = None
    # JSON Schemas (Draft 2020-12), each describing a JSON object.
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    # Defaults; unset, the deployment's (model: sim).
    model: str | None = Field(default=None, min_length=1)
    max_attempts: int | None = Field(default=None, ge=1)
    max_invalid_output_attempts: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)


class Settings(BaseSettings):
    """The configuration of one ferryman process (docs/reference.md, Configuration)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        frozen=True,
        extra="forbid",
        # Printed as it is, a ValidationError would show values (keys, URLs with
        # passwords); load_settings shows only what is safe.
        hide_input_in_errors=True,
        case_sensitive=False,
        env_ignore_empty=True,
        # FERRYMAN_PROVIDERS__OPENAI__BASE_URL=... reaches providers.openai.base_url.
        env_nested_delimiter="__",
    )

    # Where things live.
    database_url: str = "sqlite:///./ferryman.db"
    results_url: str = "file://./ferryman-results"
    # With file:// results, a worker starts no new model call while the directory's
    # filesystem has less free space than this (0: no floor): an output already paid
    # for must have somewhere to go. adapters/files/store.py has the same default.
    results_min_free_bytes: int = Field(default=16 * 1024 * 1024, ge=0)
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    url: str = "http://127.0.0.1:8000"
    api_key: str | None = Field(default=None, repr=False)
    sqlite_synchronous: Literal["FULL", "NORMAL"] = "FULL"
    # The PostgreSQL engine: each process's connection pool (plus one listening connection).
    postgres_pool_min_size: int = Field(default=1, ge=1)
    postgres_pool_max_size: int = Field(default=10, ge=1)
    postgres_connect_timeout_seconds: float = Field(default=5.0, gt=0)

    # The worker and its timeouts (docs/architecture.md, Timeouts that must agree).
    worker_concurrency: int = Field(default=64, ge=1)
    lease_seconds: float = Field(default=60.0, gt=0)
    visibility_timeout_seconds: float = Field(default=60.0, gt=0)
    heartbeat_interval_seconds: float | None = Field(default=None, gt=0)
    provider_timeout_seconds: float = Field(default=30.0, gt=0)
    attempt_timeout_seconds: float = Field(default=45.0, gt=0)
    shutdown_grace_seconds: float = Field(default=30.0, ge=0)
    receive_wait_seconds: float = Field(default=1.0, ge=0)
    # After a receive that found some work but not a full batch, and left nothing
    # visible, the next one waits this long so jobs arriving one at a time share a
    # receive (0 turns it off). A job arriving alone later than that is taken at once.
    # At most 0.5 s: more would be a mistyped milliseconds figure.
    receive_linger_seconds: float = Field(default=0.005, ge=0, le=0.5)

    # Budgets and backoff.
    max_attempts: int = Field(default=5, ge=1)
    max_receives: int = Field(default=10, ge=1)
    max_invalid_output_attempts: int = Field(default=2, ge=1)
    retry_initial_interval_seconds: float = Field(default=1.0, ge=0)
    retry_backoff_coefficient: float = Field(default=2.0, ge=1)
    retry_maximum_interval_seconds: float = Field(default=300.0, ge=0)

    # The sweeper.
    sweep_interval_seconds: float = Field(default=5.0, gt=0)
    stalled_after_seconds: float | None = Field(default=None, gt=0)

    # The API.
    idempotency_retention_seconds: float = Field(default=86400.0, gt=0)
    max_body_bytes: int = Field(default=262144, ge=1)
    # The body of POST /v1/generations/batch (up to 1,000 jobs), read whole in memory.
    max_batch_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1)
    # Submissions (and cancels) per second per tenant (0 turns the limit off), a batch
    # counting its items, with bursts of tenant_burst; reads (get, list, events) have
    # their own budget. The default is about what one API process can accept, so it
    # never holds back a producer the process could serve (docs/operations.md).
    tenant_rate_per_second: float = Field(default=5000.0, ge=0)
    tenant_burst: int = Field(default=100, ge=1)
    tenant_read_rate_per_second: float = Field(default=200.0, ge=0)
    tenant_read_burst: int = Field(default=400, ge=1)
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

    # Tenants sharing workers and storage.
    # The share of one worker process's slots that one tenant may hold at once.
    tenant_max_share: float = Field(default=0.5, gt=0, le=1)
    # Unfinished jobs one tenant may have (0: no limit); over it, submits get 429.
    tenant_max_backlog: int = Field(default=100_000, ge=0)
    # Jobs one tenant may have stored, finished or not (0: no limit); over it, 507.
    tenant_max_stored_jobs: int = Field(default=0, ge=0)
    # Finished jobs older than this are purged by the sweeper (unset: kept until
    # `ferryman purge`).
    retention_seconds: float | None = Field(default=None, gt=0)

    # Model providers and the aliases jobs name (ferryman.toml tables); the simulated
    # model is always there as provider and alias "sim" unless these say otherwise.
    providers: dict[str, ProviderSettings] = Field(default_factory=dict)
    models: dict[str, ModelSettings] = Field(default_factory=dict)

    # Tasks beyond the built-in ones (docs/tasks.md). FERRYMAN_TASKS names the Python
    # modules whose @task functions are loaded (comma-separated; found on PYTHONPATH
    # or installed); tasks_dir holds one NAME.toml per declared task, alongside the
    # [tasks.NAME] tables of ferryman.toml.
    tasks_module: Annotated[tuple[str, ...], NoDecode] = ()
    tasks_dir: str | None = None
    tasks: dict[str, TaskSettings] = Field(default_factory=dict)

    # A provider paused automatically (it refused our credentials, and so did a probe
    # of it) is probed again this long after the pause, then each wait twice the last,
    # up to the maximum; it is resumed by itself once a probe passes.
    provider_probe_initial_seconds: float = Field(default=30.0, gt=0)
    provider_probe_max_seconds: float = Field(default=600.0, gt=0)

    # The simulated model: may a job's input script it (latency, failures)? Off by
    # default: a script holds a worker's slots as long as it asks, so only test and
    # demo deployments (the tutorial, the test suites) turn it on.
    sim_scripts: bool = False
    # How often a worker looks for cancel requests on the calls it runs.
    cancel_check_seconds: float = Field(default=0.5, gt=0)

    # Operations.
    log_level: str = "INFO"
    log_json: bool = False
    failpoints: str | None = None

    @model_validator(mode="after")
    def _pool_bounds_in_order(self) -> Settings:
        if self.postgres_pool_min_size > self.postgres_pool_max_size:
            raise ValueError(
                f"postgres_pool_min_size ({self.postgres_pool_min_size}) is above "
                f"postgres_pool_max_size ({self.postgres_pool_max_size})"
            )
        return self

    @model_validator(mode="after")
    def _probe_waits_in_order(self) -> Settings:
        if self.provider_probe_initial_seconds > self.provider_probe_max_seconds:
            raise ValueError(
                f"provider_probe_initial_seconds ({self.provider_probe_initial_seconds:g}) "
                f"is above provider_probe_max_seconds ({self.provider_probe_max_seconds:g})"
            )
        return self

    @model_validator(mode="after")
    def _models_name_known_providers(self) -> Settings:
        providers = {SIM, *self.providers}
        aliases = {SIM, *self.models}
        for alias, model in self.models.items():
            if model.provider not in providers:
                raise ValueError(
                    f"models.{alias}.provider is {model.provider!r}, which is not a provider "
                    f"(known: {', '.join(sorted(providers))})"
                )
            for fallback in model.fallbacks:
                if fallback not in aliases or fallback == alias:
                    raise ValueError(
                        f"models.{alias}.fallbacks names {fallback!r}, not another model"
                    )
        return self

    @field_validator("tasks_module", mode="before")
    @classmethod
    def _module_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(name.strip() for name in value.split(",") if name.strip())
        return value

    @field_validator("sqlite_synchronous", mode="before")
    @classmethod
    def _upper_synchronous(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("log_level", mode="before")
    @classmethod
    def _known_log_level(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.upper()
            if value not in _LOG_LEVELS:
                raise ValueError(f"must be one of {', '.join(sorted(_LOG_LEVELS))}")
        return value

    @field_validator("failpoints")
    @classmethod
    def _parsable_failpoints(cls, value: str | None) -> str | None:
        Failpoints.parse(value)  # raises ValueError with the reason
        return value or None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        env = _EnvSource(settings_cls)
        path = config_file_path()
        if path is None:
            return (init_settings, env)
        return (init_settings, env, TomlConfigSettingsSource(settings_cls, path))

    # --- derived values -----------------------------------------------------------

    def unpriced_models(self) -> dict[str, list[str]]:
        """Each configured alias of a real provider, with the price fields it does not
        give: its calls would cost $0 unnoticed. The simulated model costs nothing."""
        simulated = {name for name, p in self.providers.items() if p.kind == SIM}
        if SIM not in self.providers:
            simulated.add(SIM)
        return {
            alias: missing
            for alias, model in self.models.items()
            if model.provider not in simulated and (missing := model.prices_not_given())
        }

    @property
    def heartbeat_seconds(self) -> float:
        return self.lease_policy().heartbeat_seconds

    @property
    def stalled_seconds(self) -> float:
        """How long a job may sit undriven before the sweeper acts on it."""
        if self.stalled_after_seconds is not None:
            return self.stalled_after_seconds
        return self.visibility_timeout_seconds + self.lease_seconds

    def provider_timeout_for(self, provider: str) -> float:
        """The client-side timeout of one provider's calls, whatever its kind: its own
        ``timeout_seconds``, else FERRYMAN_PROVIDER_TIMEOUT_SECONDS."""
        own = self.providers.get(provider)
        if own is not None and own.timeout_seconds is not None:
            return own.timeout_seconds
        return self.provider_timeout_seconds

    def provider_timeouts(self) -> dict[str, float]:
        """``provider_timeout_for`` of every configured provider, by name."""
        return {name: self.provider_timeout_for(name) for name in self.providers}

    def lease_policy(self) -> LeasePolicy:
        return LeasePolicy(
            lease_seconds=self.lease_seconds,
            visibility_timeout_seconds=self.visibility_timeout_seconds,
            heartbeat_interval_seconds=self.heartbeat_interval_seconds,
        )

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            initial_interval_seconds=self.retry_initial_interval_seconds,
            backoff_coefficient=self.retry_backoff_coefficient,
            maximum_interval_seconds=self.retry_maximum_interval_seconds,
            max_attempts=self.max_attempts,
            max_invalid_output_attempts=self.max_invalid_output_attempts,
        )

    def failpoint_set(self) -> Failpoints:
        return Failpoints.parse(self.failpoints)


class _EnvSource(EnvSettingsSource):
    """Environment variables, where FERRYMAN_TASKS names task modules (``tasks_module``)
    while ``tasks`` holds the [tasks.NAME] tables: the issue and the docs promise both
    names, so the plain variable is routed here. FERRYMAN_TASKS__NAME__FIELD still
    reaches a table."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        if field_name == "tasks":
            _, key, is_complex = super().get_field_value(field, field_name)
            return None, key, is_complex
        if field_name == "tasks_module":
            tables = self.settings_cls.model_fields["tasks"]
            value, _, _ = super().get_field_value(tables, "tasks")
            return value, field_name, False
        return super().get_field_value(field, field_name)


# Settings read from a variable other than FERRYMAN_<FIELD>.
_ENV_NAMES = {"tasks_module": f"{ENV_PREFIX}TASKS"}


def env_name(field: str) -> str:
    return _ENV_NAMES.get(field, f"{ENV_PREFIX}{field.upper()}")


def _describe(error: dict[str, Any]) -> str:
    loc = [str(part) for part in error.get("loc", ())]
    unknown = error.get("type") == "extra_forbidden"
    message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    if not loc:  # a rule across settings: its message names them (never the input)
        return message
    field = loc[0]
    if len(loc) > 1 or field in _NESTED_FIELDS:
        # A table's field: name the place. Tasks' values are prompts and schemas, never shown.
        where = ".".join(loc)
        variable = "__".join([env_name(field), *(part.upper() for part in loc[1:])])
        place = f"{where} (in {DEFAULT_CONFIG_FILE}, or {variable})"
        if unknown:
            return f"{place}: unknown field"
        return f"{place}: {message}{_shown_input(loc, error) if field != 'tasks' else ''}"
    if unknown:
        return f"{field}: unknown setting (not a ferryman configuration name)"
    return f"{env_name(field)} (or {field} in {DEFAULT_CONFIG_FILE}): {message}" + _shown_input(
        loc, error
    )


def _shown_input(loc: list[str], error: dict[str, Any]) -> str:
    """``, got VALUE`` for a wrong value it is safe to show; nothing for a value that may
    be a credential (by the setting's name or by its look) or a whole table."""
    value = error.get("input")
    secret_name = any(part in loc[-1].lower() for part in _SECRET_NAME_PARTS)
    if secret_name or not isinstance(value, str | int | float | bool):
        return ""
    if isinstance(value, str) and may_be_secret(value):
        return ""
    return f", got {value!r}"


def load_settings(**overrides: Any) -> Settings:
    """Read the settings, turning validation errors into one clear ConfigurationError."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        lines = [_describe(dict(error)) for error in exc.errors()]
        raise ConfigurationError("invalid configuration:\n  " + "\n  ".join(lines)) from None
    except (OSError, ValueError) as exc:  # an unreadable or malformed TOML file
        raise ConfigurationError(f"cannot read the configuration file: {exc}") from None


# --- FERRYMAN_* variables that are no setting -----------------------------------------


@dataclass(frozen=True, slots=True)
class UnknownVariable:
    """A FERRYMAN_* environment variable no setting reads (a typo, or a removed setting)."""

    name: str  # as spelled in the environment
    closest: str | None  # the known name it most resembles, if any is close

    def describe(self) -> str:
        hint = f" (did you mean {self.closest}?)" if self.closest else ""
        return f"{self.name} is not a ferryman setting and is ignored{hint}"


# Settings read as nested tables, whose variables continue after ``__`` (any name).
_NESTED_FIELDS = frozenset({"providers", "models", "tasks"})


def known_variables() -> frozenset[str]:
    """Every variable ferryman reads: one per Settings field, plus FERRYMAN_CONFIG."""
    return frozenset({CONFIG_ENV, *(env_name(name) for name in Settings.model_fields)})


def _is_nested(upper_name: str) -> bool:
    return any(upper_name.startswith(env_name(field) + "__") for field in _NESTED_FIELDS)


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[UnknownVariable]:
    """The FERRYMAN_* variables in ``environ`` (default: this process's) that nothing reads.

    Names are compared case-insensitively, as Settings reads them. The closest known
    name is looked for among the parts after the prefix, which every name shares.
    """
    env = os.environ if environ is None else environ
    known = known_variables()
    suffixes = {name.removeprefix(ENV_PREFIX): name for name in known}
    found: list[UnknownVariable] = []
    for name in sorted(env):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in known or _is_nested(upper):
            continue
        close = difflib.get_close_matches(upper.removeprefix(ENV_PREFIX), suffixes, n=1)
        found.append(UnknownVariable(name=name, closest=suffixes[close[0]] if close else None))
    return found


# --- tasks declared in a directory ------------------------------------------------------


def task_files(directory: str) -> dict[str, TaskSettings]:
    """The tasks declared in ``directory/*.toml``, one per file, named by the file's stem
    (``tasks/triage.toml`` declares ``triage``); ConfigurationError naming the file."""
    folder = Path(directory)
    if not folder.is_dir():
        raise ConfigurationError(f"FERRYMAN_TASKS_DIR is {directory}, which is not a directory")
    found: dict[str, TaskSettings] = {}
    for path in sorted(folder.glob("*.toml")):
        try:
            with path.open("rb") as file:
                table = tomllib.load(file)
            found[path.stem] = TaskSettings.model_validate(table)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigurationError(f"cannot read the task file {path}: {exc}") from None
        except ValidationError as exc:
            problems = [
                f"{'.'.join(str(part) for part in error['loc']) or '(top level)'}: {error['msg']}"
                for error in exc.errors(include_url=False, include_input=False)
            ]
            raise ConfigurationError(
                f"the task file {path} is not valid:\n  " + "\n  ".join(problems)
            ) from None
    return found
