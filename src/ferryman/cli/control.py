"""``ferryman pause``, ``resume`` and ``status`` without a job: the deployment's switches
and state, straight in the database (as ``dlq`` does), audited like the operations API.

Every process that shares the database sees a switch within a few seconds: paused
intake answers 503 with Retry-After, paused workers stop receiving, and a paused
provider (``--provider NAME``) gets no call while its jobs wait. A resume lifts an
automatic pause too (one a worker made when the provider refused our credentials).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from ferryman.cli.admin import JsonOption, user
from ferryman.cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    err_console,
    existing_database,
    fail,
    instant,
    print_json,
    print_table,
    run,
    settings,
)
from ferryman.config import SIM
from ferryman.ports.control import Switch, provider_switch

if TYPE_CHECKING:
    from ferryman.config import Settings
    from ferryman.ports.control import ProviderPause


class What(enum.StrEnum):
    """What an operator pauses besides one provider (``--provider NAME``)."""

    INTAKE = "intake"
    WORKERS = "workers"


WhatArgument = Annotated[
    What | None,
    typer.Argument(
        help="intake: submissions get 503; workers: no new attempts start. "
        "Or name a provider with --provider.",
        show_default=False,
    ),
]
ProviderOption = Annotated[
    str | None,
    typer.Option(
        "--provider",
        help="A provider ([providers.NAME], or sim) instead: its jobs wait, none is sent "
        "to it. A resume lifts a pause ferryman made by itself too.",
        show_default=False,
    ),
]
ActorOption = Annotated[str | None, typer.Option(help="Who [default: cli:<user>]")]
# As the API's SwitchRequest bounds it.
_PROVIDER_MAX_CHARS = 128


def pause(
    reason: Annotated[str, typer.Option(help="Why (recorded in the audit log).")],
    what: WhatArgument = None,
    provider: ProviderOption = None,
    actor: ActorOption = None,
    as_json: JsonOption = False,
) -> None:
    """Pause intake, workers or one provider for every process that shares the database.
    A provider paused here is never resumed automatically."""
    _switch(what, provider, paused=True, reason=reason, actor=actor, as_json=as_json)


def resume(
    what: WhatArgument = None,
    provider: ProviderOption = None,
    reason: Annotated[str | None, typer.Option(help="Why (recorded in the audit log).")] = None,
    actor: ActorOption = None,
    as_json: JsonOption = False,
) -> None:
    """Resume intake, workers or one provider (however it was paused)."""
    _switch(what, provider, paused=False, reason=reason, actor=actor, as_json=as_json)


def _switch(
    what: What | None,
    provider: str | None,
    *,
    paused: bool,
    reason: str | None,
    actor: str | None,
    as_json: bool,
) -> None:
    if (what is None) == (provider is None):
        fail("name one thing: intake, workers, or --provider NAME", EXIT_USAGE)
    if provider is not None and not 0 < len(provider.strip()) <= _PROVIDER_MAX_CHARS:
        fail(
            f"--provider must be a provider's name (1-{_PROVIDER_MAX_CHARS} characters)", EXIT_USAGE
        )
    if reason is not None and not reason.strip():
        fail("--reason must say why", EXIT_USAGE)
    who = actor or f"cli:{user()}"
    s = settings()
    if provider is not None:
        _warn_unknown_provider(s, provider)
        target = provider_switch(provider)
    else:
        assert what is not None
        target = str(what)
    was_paused, now_paused = run(_set(s, what, provider, paused, who, reason))
    if not paused and target not in was_paused:
        err_console.print(f"{target} was not paused", style="yellow")
    if as_json:
        print_json({"paused": now_paused})  # as POST /v1/admin/pause answers
        return
    verb = "paused" if paused else "resumed"
    typer.echo(f"{verb} {target}; paused now: {', '.join(now_paused) or 'nothing'}")


def _warn_unknown_provider(s: Settings, provider: str) -> None:
    """A typo would pause (or resume) nothing that runs: say so, and go on (a provider
    another process's configuration names is a name this one may not know)."""
    if provider != SIM and provider not in s.providers:
        known = ", ".join(sorted({SIM, *s.providers}))
        err_console.print(
            f"no provider {provider!r} is configured here (known: {known})", style="yellow"
        )


async def _set(
    s: Settings,
    what: What | None,
    provider: str | None,
    paused: bool,
    actor: str,
    reason: str | None,
) -> tuple[list[str], list[str]]:
    """What was paused before, and what is paused after."""
    async with existing_database(s) as runtime:
        operations = runtime.operations
        before = await operations.paused_names()
        if provider is not None:
            await operations.set_provider_paused(provider, paused, actor=actor, reason=reason)
        else:
            assert what is not None
            await operations.set_paused(Switch(what), paused, actor=actor, reason=reason)
        return before, await operations.paused_names()


@dataclass(frozen=True, slots=True)
class Overview:
    ready: bool
    checks: dict[str, dict[str, Any]]
    paused: list[str]
    queue: dict[str, float | int]
    providers: dict[str, ProviderPause]

    def as_json(self) -> dict[str, Any]:
        return {
            "status": "ready" if self.ready else "not_ready",
            "checks": self.checks,
            "paused": self.paused,
            "paused_providers": {
                name: _pause_json(pause) for name, pause in sorted(self.providers.items())
            },
            "queue": self.queue,
        }


def _pause_json(pause: ProviderPause) -> dict[str, Any]:
    # Here, not at the top: the CLI starts without the server extra, which http/ needs.
    from ferryman.http.timestamps import rfc3339

    return {
        "since": rfc3339(pause.since),
        "automatic": pause.automatic,
        "actor": pause.actor,
        "reason": pause.reason,
        "next_check_at": rfc3339(pause.next_probe_at),
    }


def _pause_text(pause: ProviderPause) -> str:
    """How a paused provider's row reads: since when, by whom, and how it ends."""
    if not pause.automatic:
        how = f"by {pause.actor}"
    elif pause.next_probe_at is None:
        how = "automatically; resume it when the account is in order"
    else:
        how = f"automatically; checked again {instant(pause.next_probe_at)}, resumes by itself"
    return f"PAUSED since {instant(pause.since)} {how}"


def overview(as_json: bool) -> None:
    """Print the deployment's state: readiness, switches, queue (exit 1 if not ready)."""
    state = run(_overview(settings()))
    if as_json:
        print_json(state.as_json())
    else:
        print_table(_overview_table(state))
    if not state.ready:
        raise typer.Exit(EXIT_FAILED)


async def _overview(s: Settings) -> Overview:
    async with existing_database(s) as runtime:
        operations = runtime.operations
        checks = await operations.readiness()
        stats = await operations.queue_stats()
        return Overview(
            ready=all(check.ok for check in checks),
            checks={
                check.name: {"ok": check.ok, **({"detail": check.detail} if check.detail else {})}
                for check in checks
            },
            paused=await operations.paused_names(),
            providers=await operations.provider_pauses(),
            queue={
                "visible": stats.visible,
                "in_flight": stats.in_flight,
                "oldest_age_seconds": stats.oldest_age_seconds,
                "dead_letters": stats.dead_letters,
                "undecodable_letters": stats.undecodable_letters,
            },
        )


def _overview_table(state: Overview) -> Table:
    table = Table(title="ferryman", show_header=False)
    table.add_column("what", no_wrap=True, style="bold")
    table.add_column("state", no_wrap=True)
    table.add_row("ready", Text("yes", "green") if state.ready else Text("NO", "bold red"))
    for name, check in state.checks.items():
        text = "ok" if check["ok"] else f"FAIL {check.get('detail', '')}"
        table.add_row(f"  {name}", Text(text, "" if check["ok"] else "red"))
    for switch in (str(Switch.INTAKE), str(Switch.WORKERS)):
        paused = switch in state.paused
        table.add_row(switch, Text("PAUSED", "bold yellow") if paused else "running")
    for name, pause in sorted(state.providers.items()):
        table.add_row(provider_switch(name), Text(_pause_text(pause), "bold yellow"))
    queue = state.queue
    table.add_row("queue waiting", str(queue["visible"]))
    table.add_row("queue in flight", str(queue["in_flight"]))
    table.add_row("oldest waiting", f"{float(queue['oldest_age_seconds']):.1f}s")
    undecodable = int(queue.get("undecodable_letters", 0))
    dead = str(queue["dead_letters"])
    if undecodable:
        dead += f" ({undecodable} no worker can read: ferryman dlq list)"
    table.add_row("dead letters", dead)
    if not state.ready:
        err_console.print("not ready: see the failed checks", style="red")
    return table
