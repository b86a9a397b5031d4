-- 0006: completion webhooks. The outbox is four columns of the job, written by the
-- change that finishes it (core/changes.py), so a crash between the terminal write and
-- the delivery loses nothing: where the client asked to be told, when the owed
-- notification is next due (NULL: nothing owed), how many attempts it has had, and the
-- seq of the terminal event it announces. Rows an older version wrote owe nothing.

ALTER TABLE jobs ADD COLUMN webhook_url TEXT;
ALTER TABLE jobs ADD COLUMN webhook_due_at REAL;
ALTER TABLE jobs ADD COLUMN webhook_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN webhook_event_seq INTEGER NOT NULL DEFAULT 0;

-- The dispatcher's scan, earliest due first: only the jobs that owe a notification.
CREATE INDEX IF NOT EXISTS jobs_webhooks_due ON jobs (webhook_due_at, job_id)
    WHERE webhook_due_at IS NOT NULL;

-- Each tenant's signing secrets, sealed (ports/webhooks.py): the current one, and the
-- one it replaced, which keeps signing beside it until previous_until.
CREATE TABLE IF NOT EXISTS webhook_secrets (
    tenant_id      TEXT PRIMARY KEY,
    current        TEXT NOT NULL,
    previous       TEXT,
    previous_until REAL,
    created_at     REAL NOT NULL
);
