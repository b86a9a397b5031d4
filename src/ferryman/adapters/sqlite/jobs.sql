-- Jobs, their idempotency entries, attempts and events.
-- A change (ferryman.core.changes) replaces the job row only if its revision is
-- still the one the change was computed from, then writes its events and attempts.

-- name: get_job
SELECT * FROM jobs WHERE job_id = :job_id;

-- name: insert_job
INSERT INTO jobs (
    job_id, tenant_id, idempotency_key, request_hash, task, model, input, metadata,
    payload_version, status, dispatch_state, attempt_count, failure_count,
    invalid_output_count, fence, attempt_id, worker_id, lease_until, not_before,
    cancel_requested, result_ref, error, traceparent, correlation_id, created_at,
    updated_at, completed_at, revision, event_seq, deliveries_without_outcome, fallback_level,
    webhook_url, webhook_due_at, webhook_attempts, webhook_event_seq
) VALUES (
    :job_id, :tenant_id, :idempotency_key, :request_hash, :task, :model, :input, :metadata,
    :payload_version, :status, :dispatch_state, :attempt_count, :failure_count,
    :invalid_output_count, :fence, :attempt_id, :worker_id, :lease_until, :not_before,
    :cancel_requested, :result_ref, :error, :traceparent, :correlation_id, :created_at,
    :updated_at, :completed_at, :revision, :event_seq, :deliveries_without_outcome,
    :fallback_level, :webhook_url, :webhook_due_at, :webhook_attempts, :webhook_event_seq
);

-- name: update_job
UPDATE jobs SET
    status = :status,
    dispatch_state = :dispatch_state,
    attempt_count = :attempt_count,
    failure_count = :failure_count,
    invalid_output_count = :invalid_output_count,
    fence = :fence,
    attempt_id = :attempt_id,
    worker_id = :worker_id,
    lease_until = :lease_until,
    not_before = :not_before,
    cancel_requested = :cancel_requested,
    result_ref = :result_ref,
    error = :error,
    updated_at = :updated_at,
    completed_at = :completed_at,
    revision = :revision,
    event_seq = :event_seq,
    deliveries_without_outcome = :deliveries_without_outcome,
    fallback_level = :fallback_level,
    webhook_due_at = :webhook_due_at,
    webhook_attempts = :webhook_attempts,
    webhook_event_seq = :webhook_event_seq
WHERE job_id = :job_id AND revision = :expected_revision;

-- name: get_idempotency
SELECT job_id, request_hash, expires_at
FROM idempotency
WHERE tenant_id = :tenant_id AND key = :key;

-- name: put_idempotency
INSERT INTO idempotency (tenant_id, key, job_id, request_hash, expires_at)
VALUES (:tenant_id, :key, :job_id, :request_hash, :expires_at)
ON CONFLICT (tenant_id, key) DO UPDATE SET
    job_id = excluded.job_id,
    request_hash = excluded.request_hash,
    expires_at = excluded.expires_at;

-- name: insert_event
INSERT INTO events (job_id, seq, at, kind, detail)
VALUES (:job_id, :seq, :at, :kind, :detail);

-- name: list_events
SELECT * FROM events WHERE job_id = :job_id ORDER BY seq;

-- name: insert_attempt
INSERT INTO attempts (
    job_id, attempt_no, attempt_id, worker_id, started_at, tenant_id, task, model
) VALUES (
    :job_id, :attempt_no, :attempt_id, :worker_id, :started_at, :tenant_id, :task, :model
);

-- name: close_attempt
-- Only an attempt with no outcome yet: an ended attempt keeps its first ending.
-- With :replaces_abandoned also one a takeover marked abandoned (its worker survived
-- and knows better).
UPDATE attempts SET
    ended_at = :ended_at,
    outcome = :outcome,
    failure_class = :failure_class,
    error_code = :error_code,
    latency_ms = :latency_ms,
    input_tokens = :input_tokens,
    output_tokens = :output_tokens,
    provider_request_id = :provider_request_id,
    model = COALESCE(:model, model),
    provider = :provider,
    provider_model = :provider_model,
    finish_reason = :finish_reason,
    cost_nano_usd = :cost_nano_usd,
    raw_output = :raw_output
WHERE job_id = :job_id AND attempt_id = :attempt_id
  AND (outcome IS NULL OR (:replaces_abandoned AND outcome = 'abandoned'));

-- name: list_attempts
SELECT * FROM attempts WHERE job_id = :job_id ORDER BY attempt_no;

-- name: list_jobs_of_tenant
-- A list reads what a JobSummary holds, never input. :before is the cursor (a job_id)
-- or a sentinel above every job_id. A row weighs :item_bytes plus the bytes of its
-- metadata and error. Rows that start past :max_bytes are not handed over, but for the
-- first two: the page (at least one row, and every row whose running total stays
-- within the budget) and one row after it, which says another page exists.
WITH page AS (
    SELECT job_id, tenant_id, task, model, metadata, status, attempt_count, attempt_id,
           cancel_requested, result_ref, error, correlation_id, created_at, updated_at,
           completed_at, fallback_level,
           :item_bytes + coalesce(length(CAST(metadata AS BLOB)), 0)
               + coalesce(length(CAST(error AS BLOB)), 0) AS listed_bytes
    FROM jobs
    WHERE tenant_id = :tenant_id
      AND job_id < :before
      AND (:status IS NULL OR status = :status)
      AND (:task IS NULL OR task = :task)
      AND (:error_code IS NULL OR json_extract(error, '$.code') = :error_code)
    ORDER BY job_id DESC
    LIMIT :limit
), weighed AS (
    SELECT *, sum(listed_bytes) OVER (ORDER BY job_id DESC ROWS UNBOUNDED PRECEDING)
        AS through_bytes,
        row_number() OVER (ORDER BY job_id DESC) AS position
    FROM page
)
SELECT * FROM weighed
WHERE through_bytes - listed_bytes <= :max_bytes OR position <= 2
ORDER BY job_id DESC;

-- name: list_jobs_of_all
WITH page AS (
    SELECT job_id, tenant_id, task, model, metadata, status, attempt_count, attempt_id,
           cancel_requested, result_ref, error, correlation_id, created_at, updated_at,
           completed_at, fallback_level,
           :item_bytes + coalesce(length(CAST(metadata AS BLOB)), 0)
               + coalesce(length(CAST(error AS BLOB)), 0) AS listed_bytes
    FROM jobs
    WHERE job_id < :before
      AND (:status IS NULL OR status = :status)
      AND (:task IS NULL OR task = :task)
      AND (:error_code IS NULL OR json_extract(error, '$.code') = :error_code)
    ORDER BY job_id DESC
    LIMIT :limit
), weighed AS (
    SELECT *, sum(listed_bytes) OVER (ORDER BY job_id DESC ROWS UNBOUNDED PRECEDING)
        AS through_bytes,
        row_number() OVER (ORDER BY job_id DESC) AS position
    FROM page
)
SELECT * FROM weighed
WHERE through_bytes - listed_bytes <= :max_bytes OR position <= 2
ORDER BY job_id DESC;

-- name: list_jobs_by_ids
-- Only the named jobs (a client waiting for many): looked up by key, so none of the
-- tenant's other jobs is read.
WITH page AS (
    SELECT job_id, tenant_id, task, model, metadata, status, attempt_count, attempt_id,
           cancel_requested, result_ref, error, correlation_id, created_at, updated_at,
           completed_at, fallback_level,
           :item_bytes + coalesce(length(CAST(metadata AS BLOB)), 0)
               + coalesce(length(CAST(error AS BLOB)), 0) AS listed_bytes
    FROM jobs
    WHERE job_id IN (SELECT value FROM json_each(:job_ids))
      AND (:tenant_id IS NULL OR tenant_id = :tenant_id)
      AND job_id < :before
      AND (:status IS NULL OR status = :status)
      AND (:task IS NULL OR task = :task)
      AND (:error_code IS NULL OR json_extract(error, '$.code') = :error_code)
    ORDER BY job_id DESC
    LIMIT :limit
), weighed AS (
    SELECT *, sum(listed_bytes) OVER (ORDER BY job_id DESC ROWS UNBOUNDED PRECEDING)
        AS through_bytes,
        row_number() OVER (ORDER BY job_id DESC) AS position
    FROM page
)
SELECT * FROM weighed
WHERE through_bytes - listed_bytes <= :max_bytes OR position <= 2
ORDER BY job_id DESC;

-- name: stalled_jobs
-- The status list repeats the partial index's condition so the index is used.
SELECT * FROM jobs
WHERE status IN ('QUEUED', 'PROCESSING', 'RETRY_SCHEDULED')
  AND updated_at < :cutoff
  AND (
       (dispatch_state = 'PENDING' AND status IN ('QUEUED', 'RETRY_SCHEDULED'))
    OR (status = 'PROCESSING' AND lease_until < :cutoff)
    OR (status = 'RETRY_SCHEDULED' AND not_before < :cutoff)
  )
  -- Not stranded while a message of the job is still queued (visible, in flight or
  -- delayed): its next delivery drives the job, and a re-sent one would only be
  -- delivered again. A job's message ids are 'msg_<job_id>_...' (messages.py): a seek
  -- in the primary key ('`' is the character after '_').
  AND NOT EXISTS (
      SELECT 1 FROM messages
      WHERE messages.id > 'msg_' || jobs.job_id || '_'
        AND messages.id < 'msg_' || jobs.job_id || '`'
  )
ORDER BY updated_at, job_id
LIMIT :limit;

-- name: ping
SELECT 1;

-- name: write_probe
INSERT INTO probe (name, at) VALUES ('readiness', :at)
ON CONFLICT (name) DO UPDATE SET at = excluded.at;

-- name: cancel_requested
SELECT job_id FROM jobs
WHERE cancel_requested = 1 AND status = 'PROCESSING'
  AND job_id IN (SELECT value FROM json_each(:job_ids));

-- name: get_jobs
SELECT * FROM jobs WHERE job_id IN (SELECT value FROM json_each(:job_ids));

-- name: existing_jobs
SELECT job_id FROM jobs WHERE job_id IN (SELECT value FROM json_each(:job_ids));

-- name: job_statuses
SELECT job_id, status FROM jobs WHERE job_id IN (SELECT value FROM json_each(:job_ids));

-- name: tenant_usage
SELECT unfinished, stored FROM tenant_usage WHERE tenant_id = :tenant_id;

-- name: add_usage
INSERT INTO tenant_usage (tenant_id, unfinished, stored)
VALUES (:tenant_id, :unfinished, :stored)
ON CONFLICT (tenant_id) DO UPDATE SET
    unfinished = unfinished + excluded.unfinished,
    stored = stored + excluded.stored;

-- name: finished_before
-- The partial index jobs_finished serves this; the status list repeats its condition.
-- A job whose webhook is still owed stays until it is delivered or given up.
SELECT job_id, tenant_id FROM jobs
WHERE status IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND completed_at < :before
  AND webhook_due_at IS NULL
ORDER BY completed_at
LIMIT :limit;

-- name: webhooks_due
-- The partial index jobs_webhooks_due serves this, in its order; the IS NOT NULL
-- repeats its condition.
SELECT * FROM jobs
WHERE webhook_due_at IS NOT NULL AND webhook_due_at <= :now
  AND tenant_id NOT IN (SELECT value FROM json_each(:skip))
ORDER BY webhook_due_at, job_id
LIMIT :limit;

-- name: delete_job_events
DELETE FROM events WHERE job_id = :job_id;

-- name: delete_job_attempts
DELETE FROM attempts WHERE job_id = :job_id;

-- name: delete_job_keys
DELETE FROM idempotency WHERE job_id = :job_id;

-- name: delete_job
DELETE FROM jobs WHERE job_id = :job_id;

-- name: delete_expired_keys
DELETE FROM idempotency WHERE rowid IN (
    SELECT rowid FROM idempotency WHERE expires_at IS NOT NULL AND expires_at <= :now
    LIMIT :limit
);

-- name: usage_report
-- :group_by is one of day, model, task (core-checked); :tenant_id NULL is every tenant.
SELECT
    CASE :group_by
        WHEN 'day' THEN strftime('%Y-%m-%d', started_at, 'unixepoch')
        WHEN 'model' THEN model
        ELSE task
    END AS key,
    COUNT(*) AS calls,
    COALESCE(SUM(failure_class IS NOT NULL), 0) AS failed_calls,
    COALESCE(SUM(input_tokens), 0) AS input_tokens,
    COALESCE(SUM(output_tokens), 0) AS output_tokens,
    COALESCE(SUM(cost_nano_usd), 0) AS cost_nano_usd,
    COALESCE(SUM(CASE WHEN outcome = 'succeeded' THEN 0 ELSE cost_nano_usd END), 0)
        AS wasted_nano_usd,
    -- Answered (a finish reason recorded) without usage: unknown, not in the sums.
    COALESCE(
        SUM(finish_reason IS NOT NULL AND (input_tokens IS NULL OR output_tokens IS NULL)), 0
    ) AS unknown_usage_calls
FROM attempts
WHERE started_at >= :start AND started_at < :end
  AND (:tenant_id IS NULL OR tenant_id = :tenant_id)
GROUP BY key
ORDER BY key;
