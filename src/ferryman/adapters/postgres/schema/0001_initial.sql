-- 0001: the first PostgreSQL schema. Times are epoch seconds (double precision) taken
-- from the caller's clock, never now(); JSON columns hold the JSON text as written.
-- Identifiers that are compared or paged through (job ids, tenant ids, keys) use the
-- "C" collation: byte order, the same on every server whatever its locale.

CREATE TABLE jobs (
    job_id                     text COLLATE "C" PRIMARY KEY,
    tenant_id                  text COLLATE "C" NOT NULL,
    idempotency_key            text,
    request_hash               text NOT NULL,
    task                       text NOT NULL,
    model                      text NOT NULL,
    input                      text NOT NULL,
    metadata                   text,
    payload_version            integer NOT NULL,
    status                     text NOT NULL,
    dispatch_state             text NOT NULL,
    attempt_count              integer NOT NULL DEFAULT 0,
    failure_count              integer NOT NULL DEFAULT 0,
    invalid_output_count       integer NOT NULL DEFAULT 0,
    fence                      integer NOT NULL DEFAULT 0,
    attempt_id                 text,
    worker_id                  text,
    lease_until                double precision,
    not_before                 double precision,
    cancel_requested           boolean NOT NULL DEFAULT false,
    result_ref                 text,
    error                      text,
    -- The error's code, derived, so listings filter on it without parsing each row.
    error_code                 text GENERATED ALWAYS AS ((error::json) ->> 'code') STORED,
    traceparent                text,
    correlation_id             text NOT NULL,
    created_at                 double precision NOT NULL,
    updated_at                 double precision NOT NULL,
    completed_at               double precision,
    revision                   integer NOT NULL DEFAULT 0,
    event_seq                  integer NOT NULL DEFAULT 0,
    deliveries_without_outcome integer NOT NULL DEFAULT 0,
    fallback_level             integer NOT NULL DEFAULT 0
);

-- A tenant's listing, newest first (the operators' listing of every tenant uses the key),
-- and both filtered by status, so a rare status is found without walking every job.
CREATE INDEX jobs_tenant_job ON jobs (tenant_id, job_id);
CREATE INDEX jobs_tenant_status_job ON jobs (tenant_id, status, job_id);
CREATE INDEX jobs_status_job ON jobs (status, job_id);

-- The sweeper's stalled scan touches only jobs that are not finished.
CREATE INDEX jobs_unfinished ON jobs (updated_at, job_id)
    WHERE status IN ('QUEUED', 'PROCESSING', 'RETRY_SCHEDULED');

-- Purging finished jobs oldest first.
CREATE INDEX jobs_finished ON jobs (completed_at)
    WHERE status IN ('SUCCEEDED', 'FAILED', 'CANCELLED');

-- The workers' batched check for cancel requests on running calls.
CREATE INDEX jobs_cancel_requested ON jobs (job_id)
    WHERE cancel_requested AND status = 'PROCESSING';

CREATE TABLE idempotency (
    tenant_id    text COLLATE "C" NOT NULL,
    key          text COLLATE "C" NOT NULL,
    job_id       text COLLATE "C" NOT NULL,
    request_hash text NOT NULL,
    -- NULL: the entry never expires.
    expires_at   double precision,
    PRIMARY KEY (tenant_id, key)
);

-- A purged job's entries, and expired ones, found without a scan.
CREATE INDEX idempotency_job ON idempotency (job_id);
CREATE INDEX idempotency_expiry ON idempotency (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE attempts (
    job_id              text COLLATE "C" NOT NULL REFERENCES jobs (job_id),
    attempt_no          integer NOT NULL,
    attempt_id          text COLLATE "C" NOT NULL UNIQUE,
    worker_id           text NOT NULL,
    started_at          double precision NOT NULL,
    ended_at            double precision,
    outcome             text,
    failure_class       text,
    error_code          text,
    latency_ms          integer,
    input_tokens        integer,
    output_tokens       integer,
    provider_request_id text,
    tenant_id           text COLLATE "C" NOT NULL,
    task                text NOT NULL,
    -- The model alias the attempt ran under (the job's, or the fallback it moved to).
    model               text NOT NULL,
    provider            text,
    provider_model      text,
    finish_reason       text,
    cost_nano_usd       bigint,
    raw_output          text,
    PRIMARY KEY (job_id, attempt_no)
);

-- Usage reports: one tenant's attempts in a time range, or every tenant's.
CREATE INDEX attempts_tenant_started ON attempts (tenant_id, started_at);
CREATE INDEX attempts_started ON attempts (started_at);

CREATE TABLE events (
    job_id text COLLATE "C" NOT NULL REFERENCES jobs (job_id),
    seq    integer NOT NULL,
    at     double precision NOT NULL,
    kind   text NOT NULL,
    detail text NOT NULL DEFAULT '{}',
    PRIMARY KEY (job_id, seq)
);

-- The job queue lives in the same database, so a job and its message commit together.
CREATE TABLE messages (
    id                text COLLATE "C" PRIMARY KEY,
    -- Send order, the tie-break between messages that became visible at once.
    seq               bigint GENERATED ALWAYS AS IDENTITY,
    body              text NOT NULL,
    tenant_id         text COLLATE "C" NOT NULL,
    sent_at           double precision NOT NULL,
    visible_at        double precision NOT NULL,
    receive_count     integer NOT NULL DEFAULT 0,
    receipt_token     text,
    first_received_at double precision
);

-- A receive: each tenant's visible messages in the order they became visible; the
-- distinct tenants are found by skipping through it.
CREATE INDEX messages_tenant_visible ON messages (tenant_id, visible_at, seq);
-- "Is anything visible at all?", asked by idle receivers before they take locks.
CREATE INDEX messages_visible ON messages (visible_at);

CREATE TABLE dead_letters (
    id               text COLLATE "C" PRIMARY KEY,
    seq              bigint GENERATED ALWAYS AS IDENTITY,
    message_id       text NOT NULL,
    body             text NOT NULL,
    sent_at          double precision NOT NULL,
    receive_count    integer NOT NULL,
    dead_lettered_at double precision NOT NULL,
    -- Why it was dead-lettered, and whose job it was (NULL: the body was unreadable).
    reason           text NOT NULL,
    job_id           text
);

CREATE INDEX dead_letters_of_jobs ON dead_letters (dead_lettered_at, seq)
    WHERE job_id IS NOT NULL;

-- What each tenant holds, kept by every change in the same transaction (quotas).
CREATE TABLE tenant_usage (
    tenant_id  text COLLATE "C" PRIMARY KEY,
    unfinished integer NOT NULL DEFAULT 0,
    stored     integer NOT NULL DEFAULT 0
);

CREATE TABLE results (
    key  text COLLATE "C" PRIMARY KEY,
    data bytea NOT NULL
);

CREATE TABLE api_keys (
    key_id      text COLLATE "C" PRIMARY KEY,
    tenant_id   text COLLATE "C" NOT NULL,
    secret_hash text NOT NULL,
    admin       boolean NOT NULL,
    created_at  double precision NOT NULL,
    expires_at  double precision,
    revoked_at  double precision,
    revoked_by  text
);

CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id, created_at, key_id);
CREATE INDEX api_keys_by_age ON api_keys (created_at, key_id);
CREATE INDEX api_keys_admin ON api_keys (key_id) WHERE admin AND revoked_at IS NULL;

CREATE TABLE control (
    switch     text COLLATE "C" PRIMARY KEY,
    paused     boolean NOT NULL,
    actor      text NOT NULL,
    updated_at double precision NOT NULL
);

-- Who paused, resumed or replayed what, when and why.
CREATE TABLE audit (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     double precision NOT NULL,
    actor  text NOT NULL,
    action text NOT NULL,
    target text NOT NULL,
    reason text
);

-- A write the readiness probe makes, so /readyz fails while writes fail.
CREATE TABLE probe (
    name text PRIMARY KEY,
    at   double precision NOT NULL
);
