"""``ferryman doctor``: the timeouts and limits that must agree (ARCHITECTURE.md section 7).

Each rule is a pure function of the Settings returning a Check that says what was
compared and, when it fails, which FERRYMAN_* variable to change. The rules for
SQS (12 h total visibility) and the Lambda handler do not apply to the embedded
SQLite engine this version ships, so they are not listed. Two live checks follow:
the database answers and the results location takes a write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from ferryman.core.errors import FerrymanError
from ferryman.wiring import check_urls, open_runtime

if TYPE_CHECKING:
    from collections.abc import Callable

    from ferryman.config import Settings
    from ferryman.wiring import Runtime

MIN_MAX_RECEIVES = 5
PROBE_KEY = "_doctor/probe"


@dataclass(frozen=True, slots=True)
class Check:
    rule: str
    value: str
    ok: bool
    fix: str = ""  # what to change when the rule fails, naming the variable


def _check(rule: str, value: str, ok: bool, fix: str) -> Check:
    return Check(rule=rule, value=value, ok=ok, fix="" if ok else fix)


def provider_timeout_below_attempt_timeout(s: Settings) -> Check:
    return _check(
        "provider timeout < attempt timeout",
        f"{s.provider_timeout_seconds:g}s < {s.attempt_timeout_seconds:g}s",
        s.provider_timeout_seconds < s.attempt_timeout_seconds,
        "lower FERRYMAN_PROVIDER_TIMEOUT_SECONDS or raise FERRYMAN_ATTEMPT_TIMEOUT_SECONDS",
    )


def attempt_timeout_within_lease(s: Settings) -> Check:
    return _check(
        "attempt timeout <= lease",
        f"{s.attempt_timeout_seconds:g}s <= {s.lease_seconds:g}s",
        s.attempt_timeout_seconds <= s.lease_seconds,
        "raise FERRYMAN_LEASE_SECONDS or lower FERRYMAN_ATTEMPT_TIMEOUT_SECONDS",
    )


def heartbeat_within_third_of_lease(s: Settings) -> Check:
    limit = s.lease_seconds / 3
    return _check(
        "heartbeat interval <= lease / 3",
        f"{s.heartbeat_seconds:g}s <= {limit:g}s",
        s.heartbeat_seconds <= limit,
        f"lower FERRYMAN_HEARTBEAT_INTERVAL_SECONDS to {limit:g} or less (or unset it)",
    )


def visibility_above_heartbeat(s: Settings) -> Check:
    return _check(
        "visibility timeout > heartbeat interval",
        f"{s.visibility_timeout_seconds:g}s > {s.heartbeat_seconds:g}s",
        s.visibility_timeout_seconds > s.heartbeat_seconds,
        "raise FERRYMAN_VISIBILITY_TIMEOUT_SECONDS or lower FERRYMAN_HEARTBEAT_INTERVAL_SECONDS",
    )


def max_receives_at_least_five(s: Settings) -> Check:
    return _check(
        f"max receives >= {MIN_MAX_RECEIVES}",
        str(s.max_receives),
        s.max_receives >= MIN_MAX_RECEIVES,
        f"raise FERRYMAN_MAX_RECEIVES to {MIN_MAX_RECEIVES} or more",
    )


def max_receives_above_max_attempts(s: Settings) -> Check:
    return _check(
        "max receives > max attempts",
        f"{s.max_receives} > {s.max_attempts}",
        s.max_receives > s.max_attempts,
        f"raise FERRYMAN_MAX_RECEIVES above {s.max_attempts} or lower FERRYMAN_MAX_ATTEMPTS",
    )


RULES: tuple[Callable[[Settings], Check], ...] = (
    provider_timeout_below_attempt_timeout,
    attempt_timeout_within_lease,
    heartbeat_within_third_of_lease,
    visibility_above_heartbeat,
    max_receives_at_least_five,
    max_receives_above_max_attempts,
)


def check_settings(settings: Settings) -> list[Check]:
    """Every configuration rule, in order."""
    return [rule(settings) for rule in RULES]


async def check_live(settings: Settings) -> list[Check]:
    """The database answers; the results location takes a write and gives it back."""
    try:
        check_urls(settings)
    except FerrymanError as exc:
        return [_check("backend available", settings.database_url, False, exc.message)]
    try:
        async with open_runtime(settings) as runtime:
            return [await _database_check(runtime), await _results_check(runtime)]
    except (FerrymanError, OSError) as exc:
        return [
            _check(
                "database reachable",
                settings.database_url,
                False,
                f"check FERRYMAN_DATABASE_URL ({type(exc).__name__}: {exc})",
            )
        ]


async def _database_check(runtime: Runtime) -> Check:
    try:
        await runtime.operations.check_ready()
    except FerrymanError as exc:
        return _check(
            "database reachable",
            runtime.database_path,
            False,
            f"check FERRYMAN_DATABASE_URL ({exc})",
        )
    return _check("database reachable", runtime.database_path, True, "")


async def _results_check(runtime: Runtime) -> Check:
    rule = "results location writable"
    try:
        ref = await runtime.results.put(PROBE_KEY, b"ok")
        readable = await runtime.results.get(ref, key=PROBE_KEY) == b"ok"
    except (OSError, KeyError, ValueError, FerrymanError) as exc:
        return _check(
            rule,
            runtime.results_location,
            False,
            f"check FERRYMAN_RESULTS_URL ({type(exc).__name__}: {exc})",
        )
    return _check(
        rule, runtime.results_location, readable, "check FERRYMAN_RESULTS_URL (read back differs)"
    )


def render(checks: list[Check]) -> Table:
    table = Table(title="ferryman doctor")
    table.add_column("rule")
    table.add_column("value", overflow="fold")
    table.add_column("result")
    table.add_column("what to change", overflow="fold")
    for check in checks:
        result = Text("ok", style="green") if check.ok else Text("FAIL", style="bold red")
        table.add_row(Text(check.rule), Text(check.value), result, Text(check.fix or "-"))
    return table
