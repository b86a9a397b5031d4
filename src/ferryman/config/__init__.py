"""Settings: every knob of a ferryman process, from FERRYMAN_* variables or a TOML file.

Precedence, highest first: keyword arguments (tests), environment variables, the
TOML file named by FERRYMAN_CONFIG (or ./ferryman.toml when present), defaults.
Only wiring.py, http/ and cli/ read Settings; everything else takes explicit
arguments. Rules that relate several values (provider timeout < lease, ...) are
not enforced here but reported by ``ferryman doctor``, so a questionable setup
still starts and can be diagnosed.

Knobs live in sections (sections.py: ``[worker] concurrency``,
FERRYMAN_WORKER__CONCURRENCY), and each keeps the flat name it had before sections
(``worker_concurrency``, FERRYMAN_WORKER_CONCURRENCY), still read: names.py.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from ferryman.config.names import (
    DEFAULT_CONFIG_FILE,
    ENV_PREFIX,
    ConfigurationError,
    closest,
    describe_error,
    env_name,
    may_be_secret,
    nest_flat_names,
    section_fields,
    toml_key,
)
from ferryman.config.sections import (
    FLAT_NAMES,
    SECTIONS,
    ClientSettings,
    HttpSettings,
    LogSettings,
    PostgresSettings,
    ResultsSettings,
    RetrySettings,
    SimSettings,
    SqliteSettings,
    SweeperSettings,
    TenantSettings,
    WebhookSettings,
    WorkerSettings,
)
from ferryman.core.lease import LeasePolicy
from ferryman.core.retry import RetryPolicy
from ferryman.failpoints import Failpoints

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pydantic.fields import FieldInfo

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_CONFIG_FILE",
    "ENV_PREFIX",
    "FLAT_NAMES",
    "SECTIONS",
    "SIM",
    "ClientSettings",
    "ConfigurationError",
    "HttpSettings",
    "LogSettings",
    "ModelSettings",
    "PostgresSettings",
    "ProviderKind",
    "ProviderSettings",
    "ResultsSettings",
    "RetrySettings",
    "Settings",
    "SimSettings",
    "SqliteSettings",
    "SweeperSettings",
    "TaskSettings",
    "TenantSettings",
    "UnknownVariable",
    "WebhookSettings",
    "WorkerSettings",
    "config_file_path",
    "env_name",
    "known_variables",
    "load_settings",
    "may_be_secret",
    "task_files",
    "unknown_variables",
]

CONFIG_ENV = "FERRYMAN_CONFIG"
# An environment variable's name (POSIX), which is what api_key_env holds.
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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

    # Where things live: the engine (its own section below) and the result store.
    database_url: str = "sqlite:///./ferryman.db"
    results_url: str = "file://./ferryman-results"

    # The engines and the file result store (an engine to come, aws, adds its section
    # beside these, in sections.py).
    sqlite: SqliteSettings = Field(default_factory=SqliteSettings)
    postgres: PostgresSettings = Field(default_factory=PostgresSettings)
    results: ResultsSettings = Field(default_factory=ResultsSettings)
    # The concerns.
    http: HttpSettings = Field(default_factory=HttpSettings)
    client: ClientSettings = Field(default_factory=ClientSettings)
    tenants: TenantSettings = Field(default_factory=TenantSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    retries: RetrySettings = Field(default_factory=RetrySettings)
    sweeper: SweeperSettings = Field(default_factory=SweeperSettings)
    sim: SimSettings = Field(default_factory=SimSettings)
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    # Seals tenants' webhook signing secrets at rest: one or more Fernet keys,
    # comma-separated, the first sealing (webhooks/sealing.py). Unset: stored in clear,
    # protected only by the database's own access control (docs/operations.md).
    secret_key: SecretStr | None = None
    log: LogSettings = Field(default_factory=LogSettings)

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

    # Operations: chaos testing.
    failpoints: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _flat_names_to_sections(cls, data: Any) -> Any:
        # Settings.model_validate({...}) with flat names; Settings(...) has had its
        # sources nested already (settings_customise_sources).
        if isinstance(data, dict):
            return nest_flat_names(data, str)
        return data

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
        sources: list[PydanticBaseSettingsSource] = [
            _Nested(init_settings, str, " (keyword arguments)"),
            _Nested(_EnvSource(settings_cls), env_name),
        ]
        path = config_file_path()
        if path is not None:
            toml = TomlConfigSettingsSource(settings_cls, path)
            sources.append(_Nested(toml, toml_key, f" (in {path})"))
        return tuple(sources)

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
        if self.sweeper.stalled_after_seconds is not None:
            return self.sweeper.stalled_after_seconds
        return self.worker.visibility_timeout_seconds + self.worker.lease_seconds

    def provider_timeout_for(self, provider: str) -> float:
        """The client-side timeout of one provider's calls, whatever its kind: its own
        ``timeout_seconds``, else FERRYMAN_PROVIDER_TIMEOUT_SECONDS."""
        own = self.providers.get(provider)
        if own is not None and own.timeout_seconds is not None:
            return own.timeout_seconds
        return self.worker.provider_timeout_seconds

    def provider_timeouts(self) -> dict[str, float]:
        """``provider_timeout_for`` of every configured provider, by name."""
        return {name: self.provider_timeout_for(name) for name in self.providers}

    def lease_policy(self) -> LeasePolicy:
        return LeasePolicy(
            lease_seconds=self.worker.lease_seconds,
            visibility_timeout_seconds=self.worker.visibility_timeout_seconds,
            heartbeat_interval_seconds=self.worker.heartbeat_interval_seconds,
        )

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            initial_interval_seconds=self.retries.initial_interval_seconds,
            backoff_coefficient=self.retries.backoff_coefficient,
            maximum_interval_seconds=self.retries.maximum_interval_seconds,
            max_attempts=self.retries.max_attempts,
            max_invalid_output_attempts=self.retries.max_invalid_output_attempts,
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

    def __call__(self) -> dict[str, Any]:
        # The flat variables from before sections (FERRYMAN_WORKER_CONCURRENCY) name no
        # field, so the base class never looks them up; _Nested moves them to their place.
        data = super().__call__()
        for section, model in SECTIONS.items():
            # FERRYMAN_WORKER__CONCURENCY is left out, as FERRYMAN_MAX_RECIEVES is:
            # every command warns about it, naming the closest variable, and doctor fails.
            table = data.get(section)
            if isinstance(table, dict):
                data[section] = {k: v for k, v in table.items() if k in model.model_fields}
        for flat in FLAT_NAMES:
            value = self.env_vars.get(env_name(flat).lower())  # read case-insensitively
            if value is not None:
                data[flat] = value
        return data


class _Nested(PydanticBaseSettingsSource):
    """A source whose flat names (``worker_concurrency``) are moved to their sections
    before the sources are merged (names.py says why); ``naming`` spells a name as
    this source does, for the error when both names are given different values."""

    def __init__(
        self, source: PydanticBaseSettingsSource, naming: Callable[[str], str], where: str = ""
    ) -> None:
        super().__init__(source.settings_cls)
        self._source = source
        self._naming = naming
        self._where = where

    def _set_current_state(self, state: dict[str, Any]) -> None:
        super()._set_current_state(state)
        self._source._set_current_state(state)

    def _set_settings_sources_data(self, states: dict[str, dict[str, Any]]) -> None:
        super()._set_settings_sources_data(states)
        self._source._set_settings_sources_data(states)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._source.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        return nest_flat_names(self._source(), self._naming, self._where)


# The keyed tables whose fields a misspelt key (providers.NAME.KEY) is compared with.
_KEYED_TABLES: dict[str, type[BaseModel]] = {
    "providers": ProviderSettings,
    "models": ModelSettings,
    "tasks": TaskSettings,
}


def load_settings(**overrides: Any) -> Settings:
    """Read the settings, turning validation errors into one clear ConfigurationError."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        lines = [
            describe_error(dict(error), top_level=Settings.model_fields, tables=_KEYED_TABLES)
            for error in exc.errors()
        ]
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


# Settings read as keyed tables, whose variables continue after ``__`` (any name).
_TABLE_FIELDS = frozenset({"providers", "models", "tasks"})


def known_variables() -> frozenset[str]:
    """Every variable ferryman reads: one per top-level field and section (a section's
    variable holds it as JSON), one per place in a section and per flat name from
    before sections, plus FERRYMAN_CONFIG."""
    names = [*Settings.model_fields, *section_fields(), *FLAT_NAMES]
    return frozenset({CONFIG_ENV, *(env_name(name) for name in names)})


def _is_keyed(upper_name: str) -> bool:
    return any(upper_name.startswith(env_name(field) + "__") for field in _TABLE_FIELDS)


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
        if not upper.startswith(ENV_PREFIX) or upper in known or _is_keyed(upper):
            continue
        near = closest(upper.removeprefix(ENV_PREFIX), suffixes)
        found.append(UnknownVariable(name=name, closest=suffixes[near] if near else None))
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
