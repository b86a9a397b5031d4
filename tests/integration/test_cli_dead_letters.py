"""Dead letters no worker can read, as an operator meets them through the CLI."""

from __future__ import annotations

import json
import os
import sqlite3
from typing import TYPE_CHECKING

from ferryman.config import Settings
from ferryman.core.clock import FakeClock
from ferryman.wiring import open_runtime

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable
    from pathlib import Path

    Cli = Callable[..., subprocess.CompletedProcess[str]]

BODY = '{"job": "not ours", "note": "[bold]markup[/bold]"}'


async def _undecodable(ferryman: Cli, tmp_path: Path, *bodies: str) -> list[str]:
    """Messages something else wrote into the queue, received once by a worker: each
    is dead-lettered as undecodable. Their ids, in order."""
    assert ferryman(tmp_path, "migrate").returncode == 0
    conn = sqlite3.connect(tmp_path / "ferryman.db")
    try:
        for n, body in enumerate(bodies):
            conn.execute(
                "INSERT INTO messages (id, body, tenant_id, sent_at, visible_at) "
                "VALUES (?, ?, 't1', ?, ?)",
                (f"raw_{n}", body, 1_600_000_000 + n, 1_600_000_000 + n),
            )
        conn.commit()
    finally:
        conn.close()
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'ferryman.db'}")
    async with open_runtime(settings, clock=FakeClock()) as runtime:
        assert await runtime.queue.receive(max_messages=10, visibility_timeout_seconds=1) == []
        letters = await runtime.queue.undecodable_letters(limit=10)
    return [letter.dead_letter_id for letter in letters]


async def test_dlq_list_shows_what_the_dead_letter_count_counts(
    ferryman_cli: Cli, tmp_path: Path
) -> None:
    ferryman = ferryman_cli
    [letter_id] = await _undecodable(ferryman, tmp_path, BODY)

    listed = ferryman(tmp_path, "dlq", "list", env={**_clean_env(), "COLUMNS": "200"})
    as_json = ferryman(tmp_path, "dlq", "list", "--json")
    status = ferryman(tmp_path, "status", "--json")

    assert listed.returncode == 0, listed.stderr
    assert "No dead-lettered jobs" in listed.stderr
    assert letter_id in listed.stdout
    assert "1 dead letters no worker can read" in listed.stderr
    assert "ferryman dlq purge" in listed.stderr
    assert json.loads(as_json.stdout)["undecodable_letters"] == 1
    queue = json.loads(status.stdout)["queue"]
    assert (queue["dead_letters"], queue["undecodable_letters"]) == (1, 1)


async def test_dlq_show_prints_the_body_as_it_was_sent(ferryman_cli: Cli, tmp_path: Path) -> None:
    ferryman = ferryman_cli
    [letter_id] = await _undecodable(ferryman, tmp_path, BODY)

    shown = ferryman(tmp_path, "dlq", "show", letter_id)
    as_json = ferryman(tmp_path, "dlq", "show", letter_id, "--json")
    missing = ferryman(tmp_path, "dlq", "show", "dl_missing")

    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == BODY + "\n"  # not rendered as markup
    assert json.loads(as_json.stdout)["body"] == BODY
    assert missing.returncode == 1
    assert "no undecodable dead letter dl_missing" in missing.stderr


async def test_dlq_purge_removes_them_and_says_what_it_could_not(
    ferryman_cli: Cli, tmp_path: Path
) -> None:
    ferryman = ferryman_cli
    first, second = await _undecodable(ferryman, tmp_path, "junk one", "junk two")

    partly = ferryman(tmp_path, "dlq", "purge", first, "dl_missing", "--reason", "a bug wrote them")
    whole = ferryman(tmp_path, "dlq", "purge", second, "--reason", "a bug", "--json")
    listed = ferryman(tmp_path, "dlq", "undecodable", "--json")
    no_reason = ferryman(tmp_path, "dlq", "purge", second, "--reason", " ")

    assert partly.returncode == 1
    assert partly.stdout.splitlines() == [
        f"purged {first}",
        "not found dl_missing (no undecodable dead letter of that id)",
    ]
    assert whole.returncode == 0, whole.stderr
    assert json.loads(whole.stdout) == {"purged": [second], "not_found": []}
    assert json.loads(listed.stdout) == {"data": [], "next_cursor": None}
    assert no_reason.returncode == 2


async def test_dlq_undecodable_pages_and_refuses_a_cursor_it_never_gave(
    ferryman_cli: Cli, tmp_path: Path
) -> None:
    ferryman = ferryman_cli
    letter_ids = await _undecodable(ferryman, tmp_path, "a", "b", "c")

    first = json.loads(ferryman(tmp_path, "dlq", "undecodable", "--limit", "2", "--json").stdout)
    rest = json.loads(
        ferryman(tmp_path, "dlq", "undecodable", "--json", "--cursor", first["next_cursor"]).stdout
    )
    bad = ferryman(tmp_path, "dlq", "undecodable", "--cursor", "nonsense")

    assert [item["id"] for item in first["data"] + rest["data"]] == letter_ids
    assert bad.returncode == 2
    assert "--cursor" in bad.stderr


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
