-- 0002: conditional writes by revision, crash loops counted per job, tenant-fair
-- receives, corrupt messages dead-lettered with a reason, quotas, retention, audit.

-- Every change advances revision; an engine writes a change only if the revision it
-- was computed from is still current. event_seq numbers the job's events.
ALTER TABLE jobs ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN event_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN deliveries_without_outcome INTEGER NOT NULL DEFAULT 0;

UPDATE jobs SET event_seq = (
    SELECT COALESCE(MAX(seq), 0) FROM events WHERE events.job_id = jobs.job_id
);

-- Purging finished jobs oldest first.
CREATE INDEX IF NOT EXISTS jobs_finished ON jobs (completed_at)
    WHERE status IN ('SUCCEEDED', 'FAILED', 'CANCELLED');

-- The cheap batched check for cancel requests on running calls.
CREATE INDEX IF NOT EXISTS jobs_cancel_requested ON jobs (job_id)
    WHERE cancel_requested = 1 AND status = 'PROCESSING';

-- Which tenant a message belongs to, so receives can share workers fairly; ordered by
-- when it became visible, so a retry does not keep its original place at the head.
ALTER TABLE messages ADD COLUMN tenant_id TEXT NOT NULL DEFAULT '';
UPDATE messages SET tenant_id = COALESCE(json_extract(body, '$.tenant_id'), '')
WHERE json_valid(body);
CREATE INDEX IF NOT EXISTS messages_tenant_visible ON messages (tenant_id, visible_at);

-- Why a message was dead-lettered, and whose job it was (NULL: the body was unreadable).
ALTER TABLE dead_letters ADD COLUMN reason TEXT NOT NULL DEFAULT 'max_receives';
ALTER TABLE dead_letters ADD COLUMN job_id TEXT;
UPDATE dead_letters SET job_id = json_extract(body, '$.job_id') WHERE json_valid(body);

-- What each tenant holds, kept by every change in the same transaction (quotas).
CREATE TABLE IF NOT EXISTS tenant_usage (
    tenant_id  TEXT PRIMARY KEY,
    unfinished INTEGER NOT NULL DEFAULT 0,
    stored     INTEGER NOT NULL DEFAULT 0
);
INSERT INTO tenant_usage (tenant_id, unfinished, stored)
SELECT tenant_id, SUM(status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')), COUNT(*)
FROM jobs GROUP BY tenant_id;

-- Who paused, resumed or replayed what, when and why.
CREATE TABLE IF NOT EXISTS audit (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    at     REAL NOT NULL,
    actor  TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    reason TEXT
);

-- A purged job's idempotency entries, and expired ones, found without a scan.
CREATE INDEX IF NOT EXISTS idempotency_job ON idempotency (job_id);
CREATE INDEX IF NOT EXISTS idempotency_expiry ON idempotency (expires_at)
    WHERE expires_at IS NOT NULL;

-- A write the readiness probe makes, so /readyz fails while writes fail.
CREATE TABLE IF NOT EXISTS probe (
    name TEXT PRIMARY KEY,
    at   REAL NOT NULL
);
