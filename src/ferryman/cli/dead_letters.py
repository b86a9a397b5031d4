"""Operator commands for dead letters no worker can read: see, inspect, purge.

A message whose body names no job (written by a bug, an operator, a newer version) is
dead-lettered at its first receive. No job is failed for it, so it is not among the
dead-lettered jobs; these commands show it, its body, and remove it, each removal in
the audit log. ``--json`` prints what the operations API answers for the same request.
"""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

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
from ferryman.core.errors import DeadLetterNotFoundError, RequestError

if TYPE_CHECKING:
    from ferryman.config import Settings
    from ferryman.ports.queue import UndecodableLetter
    from ferryman.services.operations import PurgeOfLetters, UndecodablePage

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON, as the API answers.")]
# How many a plain `dlq list` shows before it says how to see the rest.
SHOWN_IN_LIST = 20


def list_undecodable(
    limit: Annotated[int, typer.Option(min=1, max=200, help="Letters per page.")] = 50,
    cursor: Annotated[str | None, typer.Option(help="The next_cursor of a previous page.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Dead letters no worker can read (their body names no job), oldest first."""
    from ferryman.http.views import undecodable_letter_body

    page = run(_page(settings(), limit, cursor))
    if as_json:
        data = [undecodable_letter_body(letter) for letter in page.letters]
        print_json({"data": data, "next_cursor": page.next_cursor})
        return
    if not page.letters:
        err_console.print("No undecodable dead letters.")
        return
    print_table(letters_table(page.letters))
    if page.next_cursor:
        err_console.print(
            f"More: ferryman dlq undecodable --cursor {page.next_cursor}", highlight=False
        )


def show_letter(
    dead_letter_id: Annotated[str, typer.Argument(help="The letter's id (dl_...).")],
    as_json: JsonOption = False,
) -> None:
    """Print one undecodable dead letter's body, as it was sent."""
    from ferryman.http.views import undecodable_letter_body

    letter = run(_letter(settings(), dead_letter_id))
    if as_json:
        print_json(undecodable_letter_body(letter, whole=True))
        return
    err_console.print(
        f"{letter.dead_letter_id}: sent {instant(letter.sent_at)}, dead-lettered "
        f"{instant(letter.dead_lettered_at)}, {len(letter.body.encode('utf-8', 'replace'))} "
        "bytes",
        highlight=False,
    )
    # The body as text, never as Rich markup: it is whatever the sender wrote.
    typer.echo(letter.body.encode("utf-8", "replace").decode("utf-8"))


def purge_letters(
    dead_letter_ids: Annotated[list[str], typer.Argument(help="Letters to delete (dl_...).")],
    reason: Annotated[str, typer.Option(help="Why (recorded in the audit log).")],
    actor: Annotated[str | None, typer.Option(help="Who [default: cli:<user>]")] = None,
    as_json: JsonOption = False,
) -> None:
    """Delete undecodable dead letters. A job's dead letter is never deleted here (its
    job is failed by the sweeper); an id that names none is reported, and the command
    exits 1 when it deleted nothing it was asked to."""
    if not reason.strip():
        fail("--reason must say why", EXIT_USAGE)
    who = actor or f"cli:{_user()}"
    report = run(_purge(settings(), dead_letter_ids, who, reason))
    if as_json:
        print_json({"purged": report.purged, "not_found": report.not_found})
    else:
        for dead_letter_id in report.purged:
            typer.echo(f"purged {dead_letter_id}")
        for dead_letter_id in report.not_found:
            typer.echo(f"not found {dead_letter_id} (no undecodable dead letter of that id)")
    if report.not_found:
        raise typer.Exit(EXIT_FAILED)


def letters_table(letters: list[UndecodableLetter]) -> Table:
    table = Table(title="dead letters no worker can read")
    for column in ("id", "dead-lettered at", "bytes", "body"):
        table.add_column(column, no_wrap=True)
    for letter in letters:
        body = letter.body.encode("utf-8", "replace").decode("utf-8")
        preview = body[:40] + ("…" if len(body) > 40 else "")
        table.add_row(
            Text(letter.dead_letter_id),
            instant(letter.dead_lettered_at),
            str(len(body.encode("utf-8"))),
            Text(preview.replace("\n", " ")),
        )
    return table


async def _page(s: Settings, limit: int, cursor: str | None) -> UndecodablePage:
    async with existing_database(s) as runtime:
        try:
            return await runtime.operations.undecodable_letters(limit, cursor)
        except RequestError as exc:
            fail(f"--cursor: {exc.message}", EXIT_USAGE)


async def _letter(s: Settings, dead_letter_id: str) -> UndecodableLetter:
    async with existing_database(s) as runtime:
        try:
            return await runtime.operations.undecodable_letter(dead_letter_id)
        except DeadLetterNotFoundError:
            fail(
                f"no undecodable dead letter {dead_letter_id} (database {runtime.database_path}); "
                "see ferryman dlq undecodable"
            )


async def _purge(s: Settings, ids: list[str], actor: str, reason: str) -> PurgeOfLetters:
    async with existing_database(s) as runtime:
        return await runtime.operations.purge_undecodable(ids, actor=actor, reason=reason)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
