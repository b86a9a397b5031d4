"""EXPLAIN at 1,000,000 jobs: every hot access path of the PostgreSQL engine uses an index.

Makes a scratch database on the server (``--server``, default the local one), migrates
it with ferryman's own migrations, loads ``--jobs`` jobs with generate_series (most
finished, some queued, running or waiting for a retry, the unfinished ones with their
queue messages, each job with an attempt and two events, a tenth with idempotency keys),
runs ANALYZE, then prints the plan of each of the engine's own statements (from its .sql
files, with realistic parameters): get, claim (the conditional update), receive (the
tenants' skip scan, the locking pick, the mark), tenant listing (plain and filtered),
the sweeper's scans (stalled jobs, finished jobs to purge, expired keys), cancel checks
and a job's events and attempts. Each is explained twice: with its parameters (the
custom plan) and as the generic plan PostgreSQL may switch to for a prepared statement.

Exits 1, naming them, if any plan reads the jobs or messages table (or the events,
attempts or idempotency keys that grow with them) with a Seq Scan.
The scratch database is dropped at the end unless ``--keep``.

Run: ``.venv/bin/python bench/explain_postgres.py [--jobs 1000000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import secrets
import sys
import time
import urllib.parse
from typing import Any

import psycopg

from ferryman.adapters.postgres.sql import JOBS, QUEUE
from ferryman.core.clock import SystemClock
from ferryman.engines import EngineOptions, open_engine

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
TENANTS = 100
BASE = 1_700_000_000.0  # epoch seconds of the first job
STEP = 0.01  # seconds between two jobs' creation
# The tables that grow with the jobs: a Seq Scan on one of them is a bug at scale.
SEQ_SCAN = re.compile(r"Seq Scan on (jobs|messages|events|attempts|idempotency)\b")
_PARAM = re.compile(r"%\((\w+)\)s")

LOAD = [
    # Status by g % 100: 90 SUCCEEDED, 1 FAILED, 5 QUEUED, 3 PROCESSING, 1 RETRY_SCHEDULED.
    """
    INSERT INTO jobs (
        job_id, tenant_id, idempotency_key, request_hash, task, model, input,
        payload_version, status, dispatch_state, fence, attempt_id, worker_id,
        lease_until, not_before, cancel_requested, error, correlation_id,
        created_at, updated_at, completed_at, revision, event_seq
    )
    SELECT
        'gen_' || lpad(upper(to_hex(g)), 26, '0'),
        't' || ((g / 100) %% %(tenants)s),  -- independent of the status (g %% 100)
        CASE WHEN g %% 10 = 0 THEN 'key-' || g END,
        md5(g::text), 'generate', 'sim', '{"prompt":"hello"}', 1,
        s.status, 'DISPATCHED', 1,
        'att_' || lpad(upper(to_hex(g)), 26, '0'),
        CASE WHEN s.status = 'PROCESSING' THEN 'w1' END,
        CASE WHEN s.status = 'PROCESSING' THEN %(base)s + g * %(step)s + 60 END,
        CASE WHEN s.status = 'RETRY_SCHEDULED' THEN %(base)s + g * %(step)s + 30 END,
        s.status = 'PROCESSING' AND g %% 97 = 0,
        CASE WHEN s.status = 'FAILED'
             THEN '{"code":"dead_lettered","class":"DELIVERY","message":"m"}' END,
        'cor_' || g,
        %(base)s + g * %(step)s,
        %(base)s + g * %(step)s + 1,
        CASE WHEN s.status IN ('SUCCEEDED', 'FAILED') THEN %(base)s + g * %(step)s + 1 END,
        3, 2
    FROM generate_series(1, %(jobs)s) AS g
    CROSS JOIN LATERAL (SELECT CASE
        WHEN g %% 100 < 90 THEN 'SUCCEEDED'
        WHEN g %% 100 < 91 THEN 'FAILED'
        WHEN g %% 100 < 96 THEN 'QUEUED'
        WHEN g %% 100 < 99 THEN 'PROCESSING'
        ELSE 'RETRY_SCHEDULED' END AS status) AS s
    """,
    """
    INSERT INTO attempts (job_id, attempt_no, attempt_id, worker_id, started_at, ended_at,
                          outcome, tenant_id, task, model, input_tokens, output_tokens,
                          cost_nano_usd)
    SELECT job_id, 1, attempt_id, 'w1', created_at, completed_at,
           CASE status WHEN 'SUCCEEDED' THEN 'succeeded' WHEN 'FAILED' THEN 'abandoned' END,
           tenant_id, task, model, 10, 20, 1000
    FROM jobs
    """,
    """
    INSERT INTO events (job_id, seq, at, kind, detail)
    SELECT job_id, n, created_at + n, CASE n WHEN 1 THEN 'accepted' ELSE 'dispatched' END, '{}'
    FROM jobs CROSS JOIN generate_series(1, 2) AS n
    """,
    """
    INSERT INTO idempotency (tenant_id, key, job_id, request_hash, expires_at)
    SELECT tenant_id, idempotency_key, job_id, request_hash, created_at + 86400
    FROM jobs WHERE idempotency_key IS NOT NULL
    """,
    # The unfinished jobs' messages: queued ones visible, the others hidden or delayed.
    """
    INSERT INTO messages (id, body, tenant_id, sent_at, visible_at, receive_count,
                          receipt_token)
    SELECT 'msg_' || job_id || '_0',
           json_build_object('job_id', job_id, 'tenant_id', tenant_id,
                             'payload_version', 1)::text,
           tenant_id, created_at,
           CASE status WHEN 'QUEUED' THEN created_at
                       WHEN 'PROCESSING' THEN lease_until ELSE not_before END,
           CASE status WHEN 'QUEUED' THEN 0 ELSE 1 END,
           CASE status WHEN 'QUEUED' THEN NULL ELSE 'tok' END
    FROM jobs WHERE status IN ('QUEUED', 'PROCESSING', 'RETRY_SCHEDULED')
    """,
    """
    INSERT INTO dead_letters (id, message_id, body, sent_at, receive_count,
                              dead_lettered_at, reason, job_id)
    SELECT 'dl_' || job_id, 'msg_' || job_id || '_0', '{}', created_at, 10, completed_at,
           'max_receives', job_id
    FROM jobs WHERE status = 'FAILED'
    """,
    """
    INSERT INTO tenant_usage (tenant_id, unfinished, stored)
    SELECT tenant_id, COUNT(*) FILTER (WHERE completed_at IS NULL), COUNT(*)
    FROM jobs GROUP BY tenant_id
    """,
]


def _job_id(g: int) -> str:
    return "gen_" + f"{g:X}".rjust(26, "0")


def _statements(jobs: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(what, SQL block, parameters): the engine's statements with realistic values."""
    middle = jobs // 2
    now = BASE + jobs * STEP + 5
    job_ids = [_job_id(middle + i) for i in range(0, 64 * 97, 97)]
    tenants = [f"t{i}" for i in range(64)]
    listing = {"tenant_id": "t42", "before": "\U0010ffff", "limit": 51}
    filters = {"status": None, "task": None, "error_code": None}
    claim = {
        "job_id": _job_id(middle),
        "expected_revision": 3,
        "status": "PROCESSING",
        "dispatch_state": "DISPATCHED",
        "attempt_count": 1,
        "failure_count": 0,
        "invalid_output_count": 0,
        "fence": 2,
        "attempt_id": "att_x",
        "worker_id": "w2",
        "lease_until": now + 60,
        "not_before": None,
        "cancel_requested": False,
        "result_ref": None,
        "error": None,
        "updated_at": now,
        "completed_at": None,
        "revision": 4,
        "event_seq": 3,
        "deliveries_without_outcome": 0,
        "fallback_level": 0,
    }
    # The same claim as the engine sends it: one statement with its event and attempt.
    claim_change = {
        **claim,
        "events": json.dumps([{"seq": 4, "at": now, "kind": "CLAIMED", "detail": "{}"}]),
        "closed": None,
        "replaces_abandoned": False,
        "opened": json.dumps(
            {
                "attempt_no": 1,
                "attempt_id": "att_x",
                "worker_id": "w2",
                "started_at": now,
                "tenant_id": "t0",
                "task": "summarize",
                "model": "sim",
            }
        ),
        "m_id": None,
        "m_body": None,
        "m_at": None,
        "stops_running": False,
        "u_unfinished": 0,
        "u_stored": 0,
    }
    return [
        ("get", JOBS["get_job"], {"job_id": _job_id(middle)}),
        (
            "claim (the one-statement change)",
            "\n".join(
                JOBS[b] for b in ("written_by_update", "change_consequences", "change_outcome")
            ),
            claim_change,
        ),
        ("events of a job", JOBS["list_events"], {"job_id": _job_id(middle)}),
        ("attempts of a job", JOBS["list_attempts"], {"job_id": _job_id(middle)}),
        ("idempotency lookup", JOBS["lock_idempotency"], {"tenant_id": "t0", "key": "key-10"}),
        ("receive: is anything visible", QUEUE["any_visible"], {"now": now}),
        ("receive: tenants", QUEUE["next_tenants"], {"after": None, "limit": 64}),
        (
            "receive: pick (SKIP LOCKED)",
            QUEUE["visible_of_tenants"],
            {"tenants": tenants, "allowances": [8] * 64, "now": now, "taken": []},
        ),
        (
            "receive: mark",
            QUEUE["mark_received"],
            {
                "ids": ["msg_" + _job_id(middle) + "_0"],
                "tokens": ["t"],
                "visible_at": now + 60,
                "now": now,
            },
        ),
        (
            "ack (delete by receipt)",
            QUEUE["delete_message"],
            {"id": "msg_" + _job_id(middle) + "_0", "token": "t"},
        ),
        ("tenant listing", JOBS["list_jobs_of_tenant"], {**listing, **filters}),
        (
            "tenant listing, status filter",
            JOBS["list_jobs_of_tenant_by_status"],
            {**listing, **filters, "status": "FAILED"},
        ),
        (
            "operators' listing, status filter",
            JOBS["list_jobs_of_all_by_status"],
            {**listing, **filters, "status": "FAILED"},
        ),
        (
            "tenant listing, next page",
            JOBS["list_jobs_of_tenant"],
            {**listing, **filters, "before": _job_id(middle)},
        ),
        ("operators' listing", JOBS["list_jobs_of_all"], {**listing, **filters}),
        ("sweeper: stalled jobs", JOBS["stalled_jobs"], {"cutoff": now - 120, "limit": 100}),
        (
            "sweeper: finished jobs to purge",
            JOBS["finished_before"],
            {"before": BASE + jobs * STEP * 0.1, "limit": 500},
        ),
        (
            "sweeper: expired keys",
            JOBS["delete_expired_keys"],
            {"now": BASE + 86_500, "limit": 500},
        ),
        ("cancel check", JOBS["cancel_requested"], {"job_ids": job_ids}),
        ("existing jobs", JOBS["existing_jobs"], {"job_ids": job_ids}),
        ("dead letters", QUEUE["list_dead_letters"], {"limit": 10}),
    ]


def _positional(query: str) -> tuple[str, list[str]]:
    """The statement with $n placeholders (for PREPARE), and the parameter names in order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return _PARAM.sub(number, query), names


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):  # an array literal of unknown type: the parameter's type applies
        return "'{" + ",".join(f'"{v}"' for v in value) + "}'"
    return "'" + str(value).replace("'", "''") + "'"


def _explain(conn: psycopg.Connection, query: str, params: dict[str, Any]) -> tuple[str, str]:
    """The custom plan (with the values) and the generic plan, rolled back."""
    with conn.transaction(force_rollback=True):
        custom = conn.execute(f"EXPLAIN {query}", params).fetchall()
    positional, names = _positional(query)
    args = ", ".join(_literal(params[name]) for name in names)
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE ferryman_explain AS {positional}", prepare=False)
        generic = conn.execute(
            f"EXPLAIN EXECUTE ferryman_explain{f'({args})' if args else ''}", prepare=False
        ).fetchall()
        conn.execute("DEALLOCATE ferryman_explain", prepare=False)
    return "\n".join(row[0] for row in custom), "\n".join(row[0] for row in generic)


def _load(url: str, jobs: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        params = {"jobs": jobs, "tenants": TENANTS, "base": BASE, "step": STEP}
        for statement in LOAD:
            started = time.perf_counter()
            with conn.transaction():
                conn.execute("SET LOCAL synchronous_commit = off")
                rows = conn.execute(statement, params if "%(" in statement else None).rowcount
            table = statement.split("INTO", 1)[1].split()[0]
            print(f"loaded {rows:>9,} rows into {table} in {time.perf_counter() - started:.1f} s")
        conn.execute("VACUUM ANALYZE")


def _database_url(server: str, dbname: str) -> str:
    return urllib.parse.urlunsplit(urllib.parse.urlsplit(server)._replace(path="/" + dbname))


def run(server: str, jobs: int, keep: bool) -> int:
    dbname = f"ferryman_explain_{secrets.token_hex(4)}"
    url = _database_url(server, dbname)
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
        try:
            asyncio.run(_migrate(url))
            _load(url, jobs)
            failures = _report(url, jobs)
        finally:
            if keep:
                print(f"kept {url}")
            else:
                admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    if failures:
        print(f"\nFAIL: a Seq Scan on a growing table in: {', '.join(failures)}", file=sys.stderr)
        return 1
    print(f"\nOK: no Seq Scan on a growing table in {len(_statements(jobs))} statements x 2 plans")
    return 0


async def _migrate(url: str) -> None:
    """Opening the engine makes its schema; nothing else is needed of it."""
    options = EngineOptions(postgres_listen=False)
    async with open_engine(url, clock=SystemClock(), options=options):
        pass


def _report(url: str, jobs: int) -> list[str]:
    failures: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        for what, query, params in _statements(jobs):
            custom, generic = _explain(conn, query, params)
            print(f"\n== {what}\n-- with its values:\n{custom}\n-- generic:\n{generic}")
            if SEQ_SCAN.search(custom) or SEQ_SCAN.search(generic):
                failures.append(what)
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=DEFAULT_SERVER, help="a URL of the server")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = parser.parse_args(argv)
    return run(args.server, args.jobs, args.keep)


if __name__ == "__main__":
    sys.exit(main())
