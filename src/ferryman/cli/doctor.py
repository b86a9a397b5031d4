"""``ferryman doctor``: the timeouts and limits that must agree (docs/architecture.md).

Each rule is a pure function of the Settings returning a Check that says what was
compared and, when it fails, which FERRYMAN_* variable to change. The rules for
SQS (12 h total visibility) and the Lambda worker are checked on an ``aws://`` URL
only, against the live queue and function (cli/doctor_aws.py). Then come the checks
that look at the live setup: no FERRYMAN_* variable is ignored, the database exists
with a current schema and can be written, the results directory exists and can be
written and its filesystem has more free space than the floor below which workers
pause. The doctor only looks: it never creates, migrates or writes anything.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from ferryman.cli.common import no_database_message
from ferryman.cli.doctor_aws import check_aws_live, is_aws_url
from ferryman.config import unknown_variables
from ferryman.core.errors import FerrymanError
from ferryman.services.catalog import provider_reports
from ferryman.wiring import build_catalog, check_urls, probe_database, results_location

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ferryman.config import Settings
    from ferryman.wiring import DatabaseProbe

MIN_MAX_RECEIVES = 5


@dataclass(frozen=True, slots=True)
class Check:
    rule: str
    value: str
    ok: bool
    fix: str = ""  # what to change when the rule fails (or warns), naming the variable
    # Passed, but something may be unintended: shown, and the exit status stays 0.
    warning: bool = False


def _check(rule: str, value: str, ok: bool, fix: str) -> Check:
    return Check(rule=rule, value=value, ok=ok, fix="" if ok else fix)


def provider_timeout_below_attempt_timeout(s: Settings) -> Check:
    return _check(
        "provider timeout < attempt timeout",
        f"{s.worker.provider_timeout_seconds:g}s < {s.worker.attempt_timeout_seconds:g}s",
        s.worker.provider_timeout_seconds < s.worker.attempt_timeout_seconds,
        "lower FERRYMAN_PROVIDER_TIMEOUT_SECONDS or raise FERRYMAN_ATTEMPT_TIMEOUT_SECONDS",
    )


def attempt_timeout_within_lease(s: Settings) -> Check:
    return _check(
        "attempt timeout <= lease",
        f"{s.worker.attempt_timeout_seconds:g}s <= {s.worker.lease_seconds:g}s",
        s.worker.attempt_timeout_seconds <= s.worker.lease_seconds,
        "raise FERRYMAN_LEASE_SECONDS or lower FERRYMAN_ATTEMPT_TIMEOUT_SECONDS",
    )


def heartbeat_within_third_of_lease(s: Settings) -> Check:
    limit = s.worker.lease_seconds / 3
    return _check(
        "heartbeat interval <= lease / 3",
        f"{s.heartbeat_seconds:g}s <= {limit:g}s",
        s.heartbeat_seconds <= limit,
        f"lower FERRYMAN_HEARTBEAT_INTERVAL_SECONDS to {limit:g} or less (or unset it)",
    )


def visibility_above_heartbeat(s: Settings) -> Check:
    return _check(
        "visibility timeout > heartbeat interval",
        f"{s.worker.visibility_timeout_seconds:g}s > {s.heartbeat_seconds:g}s",
        s.worker.visibility_timeout_seconds > s.heartbeat_seconds,
        "raise FERRYMAN_VISIBILITY_TIMEOUT_SECONDS or lower FERRYMAN_HEARTBEAT_INTERVAL_SECONDS",
    )


def max_receives_at_least_five(s: Settings) -> Check:
    return _check(
        f"max receives >= {MIN_MAX_RECEIVES}",
        str(s.retries.max_receives),
        s.retries.max_receives >= MIN_MAX_RECEIVES,
        f"raise FERRYMAN_MAX_RECEIVES to {MIN_MAX_RECEIVES} or more",
    )


def max_receives_above_max_attempts(s: Settings) -> Check:
    return _check(
        "max receives > max attempts",
        f"{s.retries.max_receives} > {s.retries.max_attempts}",
        s.retries.max_receives > s.retries.max_attempts,
        f"raise FERRYMAN_MAX_RECEIVES above {s.retries.max_attempts} or lower FERRYMAN_MAX_ATTEMPTS",
    )


def provider_timeouts_below_attempt_timeout(s: Settings) -> Check:
    """A provider's own timeout must leave the attempt (and so the lease) room too."""
    own = {name: p.timeout_seconds for name, p in s.providers.items() if p.timeout_seconds}
    over = sorted(
        name for name, seconds in own.items() if seconds >= s.worker.attempt_timeout_seconds
    )
    shown = ", ".join(f"{name} {own[name]:g}s" for name in sorted(own)) or "none set"
    return _check(
        "each provider's timeout < attempt timeout",
        f"{shown} < {s.worker.attempt_timeout_seconds:g}s",
        not over,
        f"lower providers.{over[0]}.timeout_seconds or raise FERRYMAN_ATTEMPT_TIMEOUT_SECONDS"
        if over
        else "",
    )


def model_prices_given(s: Settings) -> Check:
    """An alias without prices costs $0 a call unnoticed: a warning, not a failure, since
    a free (self-hosted) model is legitimate; it says so by giving its prices as 0."""
    unpriced = s.unpriced_models()
    if not unpriced:
        return _check("model prices given", "every alias", True, "")
    shown = ", ".join(f"{alias} (no {' or '.join(fields)})" for alias, fields in unpriced.items())
    first = next(iter(unpriced))
    return Check(
        rule="model prices given",
        value=shown,
        ok=True,
        warning=True,
        fix=f"set input_price_per_mtok and output_price_per_mtok in [models.{first}] "
        "(0 for a free model), or its calls' cost shows as $0",
    )


RULES: tuple[Callable[[Settings], Check], ...] = (
    provider_timeout_below_attempt_timeout,
    provider_timeouts_below_attempt_timeout,
    attempt_timeout_within_lease,
    heartbeat_within_third_of_lease,
    visibility_above_heartbeat,
    max_receives_at_least_five,
    max_receives_above_max_attempts,
    model_prices_given,
)


def check_settings(settings: Settings) -> list[Check]:
    """Every configuration rule, in order."""
    return [rule(settings) for rule in RULES]


def check_environment(environ: Mapping[str, str] | None = None) -> Check:
    """No FERRYMAN_* variable is silently ignored: a typo would leave its default in force."""
    unknown = unknown_variables(environ)
    return _check(
        "FERRYMAN_* names known",
        ", ".join(u.name for u in unknown) or "none unknown",
        not unknown,
        "; ".join(u.describe() for u in unknown) + ": rename or unset",
    )


async def check_live(settings: Settings, *, function_name: str | None = None) -> list[Check]:
    """The database and the results location, looked at and never touched.

    Nothing is created, migrated or written: a mistyped path must fail here, not
    become a fresh empty database that makes every check pass. An ``aws://`` URL is
    looked at by cli/doctor_aws.py (its queue, DLQ and Lambda worker ``function_name``),
    chosen by the scheme before anything opens an engine.
    """
    if is_aws_url(settings.database_url):
        aws = await check_aws_live(settings, function_name=function_name)
        return [*aws, *await check_providers(settings)]
    try:
        check_urls(settings)
    except FerrymanError as exc:
        return [_check("backend available", settings.database_url, False, exc.message)]
    probe = await probe_database(settings)
    directory = results_location(settings)
    results = await asyncio.to_thread(_results_check, directory)
    checks = [*_database_checks(probe), results]
    if directory is not None:  # the floor applies to a results directory only
        floor = settings.results.min_free_bytes
        checks.append(await asyncio.to_thread(results_free_space, directory, floor))
    return [*checks, *await check_providers(settings)]


async def check_providers(settings: Settings) -> list[Check]:
    """Each configured provider answers and takes our key (a cheap call, never a job)."""
    try:
        catalog = build_catalog(settings)
    except FerrymanError as exc:
        return [_check("providers configured", "ferryman.toml", False, exc.message)]
    # The built-in simulated model needs no look; configured providers do.
    try:
        reports = [r for r in await provider_reports(catalog) if r.name in settings.providers]
    finally:
        await catalog.aclose()
    return [
        _check(
            f"provider {report.name} reachable",
            report.kind,
            report.ok,
            f"{report.detail}: check providers.{report.name} (base_url, api_key_env)",
        )
        for report in reports
    ]


def _database_checks(probe: DatabaseProbe) -> list[Check]:
    rule = "database reachable"
    if not probe.exists:
        return [
            _check(
                rule,
                probe.path,
                False,
                f"{no_database_message(probe.path)}; `ferryman migrate` creates a new one",
            )
        ]
    if probe.schema_version is None:
        reason = probe.error or "not a regular file"
        return [_check(rule, probe.path, False, f"cannot read it ({reason})")]
    return [_check(rule, probe.path, True, ""), _schema_check(probe), _writable_check(probe)]


def _schema_check(probe: DatabaseProbe) -> Check:
    version = probe.schema_version or 0
    value = f"version {version} of {probe.latest_version}"
    if version > probe.latest_version:
        fix = "the file was upgraded by a newer ferryman: upgrade this one"
    else:
        fix = (
            f"{probe.pending_migrations} migration(s) pending: `ferryman migrate` applies "
            "them (serve, api and worker also do on start)"
        )
    return _check("database schema current", value, version == probe.latest_version, fix)


def _writable_check(probe: DatabaseProbe) -> Check:
    if probe.writable is not None:  # a server database: the engine looked at the role's rights
        return _check(
            "database writable", probe.path, probe.writable, probe.unwritable_reason or ""
        )
    # The server writes the file and creates its -wal and -shm files next to it.
    path = Path(probe.path)
    ok = os.access(path, os.R_OK | os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)
    return _check(
        "database writable",
        probe.path,
        ok,
        f"give the user running ferryman write access to {path} and its directory",
    )


def _results_check(directory: Path | None) -> Check:
    rule = "results location writable"
    if directory is None:
        return _check(rule, "in the database", True, "")
    value = str(directory)
    if not directory.exists():
        fix = (
            f"no directory at {directory}: check FERRYMAN_RESULTS_URL; "
            "`ferryman migrate` creates it (so does the first result a worker writes)"
        )
        return _check(rule, value, False, fix)
    if not directory.is_dir():
        return _check(
            rule, value, False, f"{directory} is not a directory: check FERRYMAN_RESULTS_URL"
        )
    ok = os.access(directory, os.W_OK | os.X_OK)
    return _check(rule, value, ok, f"give the user running ferryman write access to {directory}")


def results_free_space(directory: Path, floor_bytes: int) -> Check:
    """The results filesystem's free space against the floor below which workers start
    no new call: a deployment that starts below it would take no work at all."""
    rule = "results free space >= floor"
    existing = directory
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent  # where it would be made: the same filesystem
    try:
        free = shutil.disk_usage(existing if existing.is_dir() else existing.parent).free
    except OSError as exc:
        return _check(rule, str(directory), False, f"cannot look at its filesystem: {exc.strerror}")
    return _check(
        rule,
        f"{_mib(free)} free >= {_mib(floor_bytes)}",
        free >= floor_bytes,
        f"make room on the filesystem of {directory}, or lower "
        "FERRYMAN_RESULTS_MIN_FREE_BYTES (0 turns the floor off)",
    )


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


def render(checks: list[Check]) -> Table:
    table = Table(title="ferryman doctor")
    table.add_column("rule")
    table.add_column("value", overflow="fold")
    table.add_column("result")
    table.add_column("what to change", overflow="fold")
    for check in checks:
        if not check.ok:
            result = Text("FAIL", style="bold red")
        elif check.warning:
            result = Text("warn", style="bold yellow")
        else:
            result = Text("ok", style="green")
        table.add_row(Text(check.rule), Text(check.value), result, Text(check.fix or "-"))
    return table
