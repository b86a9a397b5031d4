"""``ferryman pause``, ``resume`` and ``status`` without a job: the deployment's switches
and state, straight in the database (as ``dlq`` does), audited like the operations API.

Every process that shares the database sees a switch within a few seconds: paused
intake answers 503 with Retry-After, paused workers stop receiving.
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
    print_json,
    print_table,
    run,
    settings,
)
from ferryman.ports.control import Switch

if TYPE_CHECKING:
    from ferryman.config import Settings


class What(enum.StrEnum):
    """What an operator pauses (a provider is paused and resumed over the API)."""

    INTAKE = "intake"
    WORKERS = "workers"


WhatArgument = Annotated[
    What, typer.Argument(help="intake: submissions get 503; workers: no new attempts start.")
]
ActorOption = Annotated[str | None, typer.Option(help="Who [default: cli:<user>]")]


def pause(
    what: WhatArgument,
    reason: Annotated[str, typer.Option(help="Why (recorded in the audit log).")],
    actor: ActorOption = None,
    as_json: JsonOption = False,
) -> None:
    """Pause intake or workers for every process that shares the database."""
    _switch(what, paused=True, reason=reason, actor=actor, as_json=as_json)


def resume(
    what: WhatArgument,
    reason: Annotated[str | None, typer.Option(help="Why (recorded in the audit log).")] = None,
    actor: ActorOption = None,
    as_json: JsonOption = False,
) -> None:
    """Resume intake or workers."""
    _switch(what, paused=False, reason=reason, actor=actor, as_json=as_json)


def _switch(
    what: What, *, paused: bool, reason: str | None, actor: str | None, as_json: bool
) -> None:
    if reason is not None and not reason.strip():
        fail("--reason must say why", EXIT_USAGE)
    who = actor or f"cli:{user()}"
    now_paused = run(_set(settings(), Switch(what), paused, who, reason))
    if as_json:
        print_json({"paused": now_paused})  # as POST /v1/admin/pause answers
        return
    verb = "paused" if paused else "resumed"
    typer.echo(f"{verb} {what}; paused now: {', '.join(now_paused) or 'nothing'}")


async def _set(
    s: Settings, switch: Switch, paused: bool, actor: str, reason: str | None
) -> list[str]:
    async with existing_database(s) as runtime:
        await runtime.operations.set_paused(switch, paused, actor=actor, reason=reason)
        return await runtime.operations.paused_names()


@dataclass(frozen=True, slots=True)
class Overview:
    ready: bool
    checks: dict[str, dict[str, Any]]
    paused: list[str]
    queue: dict[str, float | int]

    def as_json(self) -> dict[str, Any]:
        return {
            "status": "ready" if self.ready else "not_ready",
            "checks": self.checks,
            "paused": self.paused,
            "queue": self.queue,
        }


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
    for name in state.paused:
        if name not in {str(Switch.INTAKE), str(Switch.WORKERS)}:
            table.add_row(name, Text("PAUSED", "bold yellow"))
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
