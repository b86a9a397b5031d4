-- 0004: what every attempt cost and why it ended, counted by tenant, model and task;
-- a job that moved to a fallback model says so.

ALTER TABLE attempts ADD COLUMN tenant_id TEXT NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN task TEXT NOT NULL DEFAULT '';
-- The model alias the attempt ran under (the job's, or the fallback it had moved to).
ALTER TABLE attempts ADD COLUMN model TEXT NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN provider TEXT;
-- The provider's model that answered (a dated snapshot, say).
ALTER TABLE attempts ADD COLUMN provider_model TEXT;
ALTER TABLE attempts ADD COLUMN finish_reason TEXT;
ALTER TABLE attempts ADD COLUMN cost_nano_usd INTEGER;
-- An answer that broke the output schema, kept (bounded) for its tenant to debug with.
ALTER TABLE attempts ADD COLUMN raw_output TEXT;

UPDATE attempts SET
    tenant_id = (SELECT tenant_id FROM jobs WHERE jobs.job_id = attempts.job_id),
    task = (SELECT task FROM jobs WHERE jobs.job_id = attempts.job_id),
    model = (SELECT model FROM jobs WHERE jobs.job_id = attempts.job_id);

-- Usage reports: one tenant's attempts in a time range.
CREATE INDEX IF NOT EXISTS attempts_tenant_started ON attempts (tenant_id, started_at);
CREATE INDEX IF NOT EXISTS attempts_started ON attempts (started_at);

-- 0 on the job's own model; n after moving to its n-th fallback.
ALTER TABLE jobs ADD COLUMN fallback_level INTEGER NOT NULL DEFAULT 0;
