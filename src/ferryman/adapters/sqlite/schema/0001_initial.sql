-- 0001: the first schema (ferryman 0.1). Times are epoch seconds (REAL); JSON columns hold TEXT.
-- A database made before migrations existed holds exactly this and is recorded as at 0001.

CREATE TABLE IF NOT EXISTS jobs (
    job_id               TEXT PRIMARY KEY,
    tenant_id            TEXT NOT NULL,
    idempotency_key      TEXT,
    request_hash         TEXT NOT NULL,
    task                 TEXT NOT NULL,
    model                TEXT NOT NULL,
    input                TEXT NOT NULL,
    metadata             TEXT,
    payload_version      INTEGER NOT NULL,
    status               TEXT NOT NULL,
    dispatch_state       TEXT NOT NULL,
    attempt_count        INTEGER NOT NULL DEFAULT 0,
    failure_count        INTEGER NOT NULL DEFAULT 0,
    invalid_output_count INTEGER NOT NULL DEFAULT 0,
    fence                INTEGER NOT NULL DEFAULT 0,
    attempt_id           TEXT,
    worker_id            TEXT,
    lease_until          REAL,
    not_before           REAL,
    cancel_requested     INTEGER NOT NULL DEFAULT 0,
    result_ref           TEXT,
    error                TEXT,
    traceparent          TEXT,
    correlation_id       TEXT NOT NULL,
    created_at           REAL NOT NULL,
    updated_at           REAL NOT NULL,
    completed_at         REAL
);

-- A tenant's listing, newest first.
CREATE INDEX IF NOT EXISTS jobs_tenant_job ON jobs (tenant_id, job_id);

-- The sweeper's scan touches only jobs that are not finished.
CREATE INDEX IF NOT EXISTS jobs_unfinished ON jobs (updated_at)
    WHERE status IN ('QUEUED', 'PROCESSING', 'RETRY_SCHEDULED');

CREATE TABLE IF NOT EXISTS idempotency (
    tenant_id    TEXT NOT NULL,
    key          TEXT NOT NULL,
    job_id       TEXT NOT NULL REFERENCES jobs (job_id),
    request_hash TEXT NOT NULL,
    -- NULL: the entry never expires.
    expires_at   REAL,
    PRIMARY KEY (tenant_id, key)
);

CREATE TABLE IF NOT EXISTS attempts (
    job_id              TEXT NOT NULL REFERENCES jobs (job_id),
    attempt_no          INTEGER NOT NULL,
    attempt_id          TEXT NOT NULL UNIQUE,
    worker_id           TEXT NOT NULL,
    started_at          REAL NOT NULL,
    ended_at            REAL,
    outcome             TEXT,
    failure_class       TEXT,
    error_code          TEXT,
    latency_ms          INTEGER,
    input_tokens        INTEGER,
    output_tokens       INTEGER,
    provider_request_id TEXT,
    PRIMARY KEY (job_id, attempt_no)
);

CREATE TABLE IF NOT EXISTS events (
    job_id TEXT NOT NULL REFERENCES jobs (job_id),
    seq    INTEGER NOT NULL,
    at     REAL NOT NULL,
    kind   TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (job_id, seq)
);

-- The job queue lives in the same file, so a job and its message commit together.
CREATE TABLE IF NOT EXISTS messages (
    id                TEXT PRIMARY KEY,
    body              TEXT NOT NULL,
    sent_at           REAL NOT NULL,
    visible_at        REAL NOT NULL,
    receive_count     INTEGER NOT NULL DEFAULT 0,
    receipt_token     TEXT,
    first_received_at REAL
);

CREATE INDEX IF NOT EXISTS messages_visible ON messages (visible_at);

CREATE TABLE IF NOT EXISTS dead_letters (
    id                TEXT PRIMARY KEY,
    message_id        TEXT NOT NULL,
    body              TEXT NOT NULL,
    sent_at           REAL NOT NULL,
    receive_count     INTEGER NOT NULL,
    dead_lettered_at  REAL NOT NULL
);

CREATE INDEX IF NOT EXISTS dead_letters_at ON dead_letters (dead_lettered_at);

CREATE TABLE IF NOT EXISTS results (
    key        TEXT PRIMARY KEY,
    data       BLOB NOT NULL
);

CREATE TABLE IF NOT EXISTS api_keys (
    key_id      TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    secret_hash TEXT NOT NULL,
    admin       INTEGER NOT NULL,
    created_at  REAL NOT NULL
);

CREATE TABLE IF NOT EXISTS control (
    switch     TEXT PRIMARY KEY,
    paused     INTEGER NOT NULL,
    actor      TEXT NOT NULL,
    updated_at REAL NOT NULL
);
