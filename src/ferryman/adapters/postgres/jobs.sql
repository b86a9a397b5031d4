-- Jobs, their idempotency entries, attempts and events (psycopg's %(name)s parameters).
-- A change (ferryman.core.changes) replaces the job row only if its revision is
-- still the one the change was computed from, then writes its events and attempts.

-- name: get_job
SELECT * FROM jobs WHERE job_id = %(job_id)s;

-- name: claim_idempotency
-- Taken first: a concurrent accept with the same key waits here for this one to
-- commit, then finds its entry (so two requests never both create a job).
INSERT INTO idempotency (tenant_id, key, job_id, request_hash, expires_at)
VALUES (%(tenant_id)s, %(key)s, %(job_id)s, %(request_hash)s, %(expires_at)s)
ON CONFLICT (tenant_id, key) DO NOTHING;

-- name: lock_idempotency
SELECT job_id, request_hash, expires_at
FROM idempotency
WHERE tenant_id = %(tenant_id)s AND key = %(key)s
FOR UPDATE;

-- name: replace_idempotency
UPDATE idempotency SET
    job_id = %(job_id)s, request_hash = %(request_hash)s, expires_at = %(expires_at)s
WHERE tenant_id = %(tenant_id)s AND key = %(key)s;

-- name: list_events
SELECT * FROM events WHERE job_id = %(job_id)s ORDER BY seq;

-- name: close_attempt
-- Only an attempt with no outcome yet: an ended attempt keeps its first ending.
-- With replaces_abandoned also one a takeover marked abandoned (its worker survived
-- and knows better).
UPDATE attempts SET
    ended_at = %(ended_at)s,
    outcome = %(outcome)s,
    failure_class = %(failure_class)s,
    error_code = %(error_code)s,
    latency_ms = %(latency_ms)s,
    input_tokens = %(input_tokens)s,
    output_tokens = %(output_tokens)s,
    provider_request_id = %(provider_request_id)s,
    model = COALESCE(%(model)s, model),
    provider = %(provider)s,
    provider_model = %(provider_model)s,
    finish_reason = %(finish_reason)s,
    cost_nano_usd = %(cost_nano_usd)s,
    raw_output = %(raw_output)s
WHERE job_id = %(job_id)s AND attempt_id = %(attempt_id)s
  AND (outcome IS NULL OR (%(replaces_abandoned)s AND outcome = 'abandoned'));

-- name: list_attempts
SELECT * FROM attempts WHERE job_id = %(job_id)s ORDER BY attempt_no;

-- name: list_jobs_of_tenant
-- A list reads what a JobSummary holds, never input (a large input stays in its TOAST
-- table). The cursor is a job_id or a sentinel above every job_id. A row weighs the
-- item allowance plus the bytes of its metadata and error. Rows that start past the
-- byte budget are not sent, but for the first two: the page (at least one row, and
-- every row whose running total stays within the budget) and one row after it, which
-- says another page exists.
WITH page AS (
    SELECT job_id, tenant_id, task, model, metadata, status, attempt_count, attempt_id,
           cancel_requested, result_ref, error, correlation_id, created_at, updated_at,
           completed_at, fallback_level,
           %(item_bytes)s::bigint + coalesce(octet_length(metadata), 0)
               + coalesce(octet_length(error), 0) AS listed_bytes
    FROM jobs
    WHERE tenant_id = %(tenant_id)s
      AND job_id < %(before)s
      AND (%(status)s::text IS NULL OR status = %(status)s)
      AND (%(task)s::text IS NULL OR task = %(task)s)
      AND (%(error_code)s::text IS NULL OR error_code = %(error_code)s)
    ORDER BY job_id DESC
    LIMIT %(limit)s
), weighed AS (
    SELECT *, (sum(listed_bytes) OVER (ORDER BY job_id DESC ROWS UNBOUNDED PRECEDING))::bigint
        AS through_bytes,
        row_number() OVER (ORDER BY job_id DESC) AS position
    FROM page
)
SELECT * FROM weighed
WHERE through_bytes - listed_bytes <= %(max_bytes)s OR position <= 2
ORDER BY job_id DESC;

-- name: list_jobs_of_tenant_by_status
WITH page AS (
    SELECT job_id, tenant_id, task, model, metadata, status, attempt_count, attempt_id,
           cancel_requested, result_ref, error, correlation_id, created_at, updated_at,
           completed_at, fallback_level,
           %(item_bytes)s::bigint + coalesce(octet_length(metadata), 0)
               + coalesce(octet_length(error), 0) AS listed_bytes
    FROM jobs
    WHERE tenant_id = %(tenant_id)s
      AND status = %(status)s
      AND job_id < %(before)s
      AND (%(task)s::text IS NULL OR task = %(task)s)
      AND (%(error_code)s::text IS NULL OR error_code = %(error_code)s)
    ORDER BY job_id DESC
    LIMIT %(limit)s
), weighed AS (
    SELECT *, (sum(listed_bytes) OVER (ORDER BY job_id DESC ROWS UNBOUNDED PRECEDING))::bigint
        AS through_bytes,
        row_number() OVER (ORDER BY job_id DESC) AS position
    FROM page
)
SELECT * FROM weighed
WHERE through_bytes - listed_bytes <= %(max_bytes)s OR position <= 2
ORDER BY job_id DESC;

-- name: list_jobs_of_all_by_status
WITH page AS (
    SELECT job_id, tenant_id, task, model, metadata, status, attempt_count, attempt_id,
           cancel_requested, result_ref, error, correlation_id, created_at, updated_at,
           completed_at, fallback_level,
           %(item_bytes)s::bigint + coalesce(octet_length(metadata), 0)
               + coalesce(octet_length(error), 0) AS listed_bytes
    FROM jobs
    WHERE status = %(status)s
      AND job_id < %(before)s
      AND (%(task)s::text IS NULL OR task = %(task)s)
      AND (%(error_code)s::text IS NULL OR error_code = %(error_code)s)
    ORDER BY job_id DESC
    LIMIT %(limit)s
), weighed AS (
    SELECT *, (sum(listed_bytes) OVER (ORDER BY job_id DESC ROWS UNBOUNDED PRECEDING))::bigint
        AS through_bytes,
        row_number() OVER (ORDER BY job_id DESC) AS position
    FROM page
)
SELECT * FROM weighed
WHERE through_bytes - listed_bytes <= %(max_bytes)s OR position <= 2
ORDER BY job_id DESC;

-- name: list_jobs_of_all
WITH page AS (
    SELECT job_id, tenant_id, task, model, metadata, status, attempt_count, attempt_id,
           cancel_requested, result_ref, error, correlation_id, created_at, updated_at,
           completed_at, fallback_level,
           %(item_bytes)s::bigint + coalesce(octet_length(metadata), 0)
               + coalesce(octet_length(error), 0) AS listed_bytes
    FROM jobs
    WHERE job_id < %(before)s
      AND (%(status)s::text IS NULL OR status = %(status)s)
      AND (%(task)s::text IS NULL OR task = %(task)s)
      AND (%(error_code)s::text IS NULL OR error_code = %(error_code)s)
    ORDER BY job_id DESC
    LIMIT %(limit)s
), weighed AS (
    SELECT *, (sum(listed_bytes) OVER (ORDER BY job_id DESC ROWS UNBOUNDED PRECEDING))::bigint
        AS through_bytes,
        row_number() OVER (ORDER BY job_id DESC) AS position
    FROM page
)
SELECT * FROM weighed
WHERE through_bytes - listed_bytes <= %(max_bytes)s OR position <= 2
ORDER BY job_id DESC;

-- name: list_jobs_by_ids
-- Only the named jobs (a client waiting for many): looked up by key, so none of the
-- tenant's other jobs is read.
WITH page AS (
    SELECT job_id, tenant_id, task, model, metadata, status, attempt_count, attempt_id,
           cancel_requested, result_ref, error, correlation_id, created_at, updated_at,
           completed_at, fallback_level,
           %(item_bytes)s::bigint + coalesce(octet_length(metadata), 0)
               + coalesce(octet_length(error), 0) AS listed_bytes
    FROM jobs
    WHERE job_id = ANY(%(job_ids)s::text[])
      AND (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
      AND job_id < %(before)s
      AND (%(status)s::text IS NULL OR status = %(status)s)
      AND (%(task)s::text IS NULL OR task = %(task)s)
      AND (%(error_code)s::text IS NULL OR error_code = %(error_code)s)
    ORDER BY job_id DESC
    LIMIT %(limit)s
), weighed AS (
    SELECT *, (sum(listed_bytes) OVER (ORDER BY job_id DESC ROWS UNBOUNDED PRECEDING))::bigint
        AS through_bytes,
        row_number() OVER (ORDER BY job_id DESC) AS position
    FROM page
)
SELECT * FROM weighed
WHERE through_bytes - listed_bytes <= %(max_bytes)s OR position <= 2
ORDER BY job_id DESC;

-- name: stalled_jobs
-- The status list repeats the partial index's condition so the index is used.
SELECT * FROM jobs
WHERE status IN ('QUEUED', 'PROCESSING', 'RETRY_SCHEDULED')
  AND updated_at < %(cutoff)s
  AND (
       (dispatch_state = 'PENDING' AND status IN ('QUEUED', 'RETRY_SCHEDULED'))
    OR (status = 'PROCESSING' AND lease_until < %(cutoff)s)
    OR (status = 'RETRY_SCHEDULED' AND not_before < %(cutoff)s)
  )
  -- Not stranded while a message of the job is still queued (visible, in flight or
  -- delayed): its next delivery drives the job, and a re-sent one would only be
  -- delivered again. A job's message ids are 'msg_<job_id>_...' (messages.py): a seek
  -- in the primary key ('`' is the character after '_').
  AND NOT EXISTS (
      SELECT 1 FROM messages
      WHERE messages.id > ('msg_' || jobs.job_id || '_') COLLATE "C"
        AND messages.id < ('msg_' || jobs.job_id || '`') COLLATE "C"
  )
ORDER BY updated_at, job_id
LIMIT %(limit)s;

-- name: ping
SELECT 1;

-- name: write_probe
INSERT INTO probe (name, at) VALUES ('readiness', %(at)s)
ON CONFLICT (name) DO UPDATE SET at = excluded.at;

-- name: cancel_requested
SELECT job_id FROM jobs
WHERE cancel_requested AND status = 'PROCESSING' AND job_id = ANY(%(job_ids)s::text[]);

-- name: notify_cancels
-- Runs the cancel check of every listening worker process now; delivered only if the
-- transaction that asks a running attempt to stop commits.
SELECT pg_notify('ferryman_cancels', '');

-- name: get_jobs
SELECT * FROM jobs WHERE job_id = ANY(%(job_ids)s::text[]);

-- name: existing_jobs
SELECT job_id FROM jobs WHERE job_id = ANY(%(job_ids)s::text[]);

-- name: job_statuses
SELECT job_id, status FROM jobs WHERE job_id = ANY(%(job_ids)s::text[]);

-- name: tenant_usage
SELECT unfinished, stored FROM tenant_usage WHERE tenant_id = %(tenant_id)s;

-- name: add_usage
INSERT INTO tenant_usage (tenant_id, unfinished, stored)
VALUES (%(tenant_id)s, %(unfinished)s, %(stored)s)
ON CONFLICT (tenant_id) DO UPDATE SET
    unfinished = tenant_usage.unfinished + excluded.unfinished,
    stored = tenant_usage.stored + excluded.stored;

-- name: finished_before
-- The partial index jobs_finished serves this; the status list repeats its condition.
-- Rows another purger holds are skipped, not waited for. A job whose webhook is still
-- owed stays until it is delivered or given up.
SELECT job_id, tenant_id FROM jobs
WHERE status IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND completed_at < %(before)s
  AND webhook_due_at IS NULL
ORDER BY completed_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: webhooks_due
-- The partial index jobs_webhooks_due serves this, in its order; the IS NOT NULL
-- repeats its condition.
SELECT * FROM jobs
WHERE webhook_due_at IS NOT NULL AND webhook_due_at <= %(now)s
  AND NOT (tenant_id = ANY(%(skip)s::text[]))
ORDER BY webhook_due_at, job_id
LIMIT %(limit)s;

-- name: delete_jobs_events
DELETE FROM events WHERE job_id = ANY(%(job_ids)s::text[]);

-- name: delete_jobs_attempts
DELETE FROM attempts WHERE job_id = ANY(%(job_ids)s::text[]);

-- name: delete_jobs_keys
DELETE FROM idempotency WHERE job_id = ANY(%(job_ids)s::text[]);

-- name: delete_jobs
DELETE FROM jobs WHERE job_id = ANY(%(job_ids)s::text[]);

-- name: delete_expired_keys
-- By row address: the expiry index finds them, and the delete goes straight to them.
DELETE FROM idempotency WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM idempotency
    WHERE expires_at IS NOT NULL AND expires_at <= %(now)s
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
));

-- name: usage_report
-- %(group_by)s is one of day, model, task (core-checked); a NULL tenant is every tenant.
-- Keys in byte order, as every engine sorts them.
SELECT * FROM (
    SELECT
        CASE %(group_by)s::text
            WHEN 'day' THEN to_char(to_timestamp(started_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD')
            WHEN 'model' THEN model
            ELSE task
        END AS key,
        COUNT(*) AS calls,
        COUNT(*) FILTER (WHERE failure_class IS NOT NULL) AS failed_calls,
        COALESCE(SUM(input_tokens), 0)::bigint AS input_tokens,
        COALESCE(SUM(output_tokens), 0)::bigint AS output_tokens,
        COALESCE(SUM(cost_nano_usd), 0)::bigint AS cost_nano_usd,
        COALESCE(SUM(cost_nano_usd) FILTER (WHERE outcome IS DISTINCT FROM 'succeeded'), 0)::bigint
            AS wasted_nano_usd,
        -- Answered (a finish reason recorded) without usage: unknown, not in the sums.
        COUNT(*) FILTER (
            WHERE finish_reason IS NOT NULL AND (input_tokens IS NULL OR output_tokens IS NULL)
        ) AS unknown_usage_calls
    FROM attempts
    WHERE started_at >= %(start)s AND started_at < %(end)s
      AND (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
    GROUP BY 1
) AS usage
ORDER BY key COLLATE "C";

-- A change in ONE statement, so a group commit can pipeline a batch of them (grouping.py):
-- written_by_update or written_by_insert (the job row, conditional), then
-- change_consequences, whose every part is written only if the job row was
-- (``FROM written``). A part the change lacks is an empty array or a NULL. Data-modifying
-- CTEs all run, referenced or not, on one snapshot; no two of them touch the same row.
-- The pg_notify calls run only if the row was written, and are delivered only if the
-- transaction commits. The events and the attempt rows travel as JSON
-- (json_populate_record[set]): psycopg caches its parse of a statement only up to 50
-- parameters (parsing this one anew each time cost more than the round trips it
-- saves), and dumping one JSON text is cheaper for it than dumping arrays.

-- name: written_by_update
WITH written AS (
    UPDATE jobs SET
        status = %(status)s,
        dispatch_state = %(dispatch_state)s,
        attempt_count = %(attempt_count)s,
        failure_count = %(failure_count)s,
        invalid_output_count = %(invalid_output_count)s,
        fence = %(fence)s,
        attempt_id = %(attempt_id)s,
        worker_id = %(worker_id)s,
        lease_until = %(lease_until)s,
        not_before = %(not_before)s,
        cancel_requested = %(cancel_requested)s,
        result_ref = %(result_ref)s,
        error = %(error)s,
        updated_at = %(updated_at)s,
        completed_at = %(completed_at)s,
        revision = %(revision)s,
        event_seq = %(event_seq)s,
        deliveries_without_outcome = %(deliveries_without_outcome)s,
        fallback_level = %(fallback_level)s,
        webhook_due_at = %(webhook_due_at)s,
        webhook_attempts = %(webhook_attempts)s,
        webhook_event_seq = %(webhook_event_seq)s
    WHERE job_id = %(job_id)s AND revision = %(expected_revision)s
    RETURNING job_id, tenant_id
)

-- name: written_by_insert
WITH written AS (
    INSERT INTO jobs (
        job_id, tenant_id, idempotency_key, request_hash, task, model, input, metadata,
        payload_version, status, dispatch_state, attempt_count, failure_count,
        invalid_output_count, fence, attempt_id, worker_id, lease_until, not_before,
        cancel_requested, result_ref, error, traceparent, correlation_id, created_at,
        updated_at, completed_at, revision, event_seq, deliveries_without_outcome,
        fallback_level, webhook_url, webhook_due_at, webhook_attempts, webhook_event_seq
    ) VALUES (
        %(job_id)s, %(tenant_id)s, %(idempotency_key)s, %(request_hash)s, %(task)s,
        %(model)s, %(input)s, %(metadata)s, %(payload_version)s, %(status)s,
        %(dispatch_state)s, %(attempt_count)s, %(failure_count)s,
        %(invalid_output_count)s, %(fence)s, %(attempt_id)s, %(worker_id)s,
        %(lease_until)s, %(not_before)s, %(cancel_requested)s, %(result_ref)s, %(error)s,
        %(traceparent)s, %(correlation_id)s, %(created_at)s, %(updated_at)s,
        %(completed_at)s, %(revision)s, %(event_seq)s, %(deliveries_without_outcome)s,
        %(fallback_level)s, %(webhook_url)s, %(webhook_due_at)s, %(webhook_attempts)s,
        %(webhook_event_seq)s
    )
    ON CONFLICT (job_id) DO NOTHING
    RETURNING job_id, tenant_id
)

-- name: change_consequences
, new_events AS (
    INSERT INTO events (job_id, seq, at, kind, detail)
    SELECT written.job_id, e.seq, e.at, e.kind, e.detail
    FROM written CROSS JOIN json_populate_recordset(NULL::events, %(events)s::json) AS e
), closed_attempt AS (
    -- As close_attempt: an ended attempt keeps its first ending.
    UPDATE attempts SET
        ended_at = c.ended_at,
        outcome = c.outcome,
        failure_class = c.failure_class,
        error_code = c.error_code,
        latency_ms = c.latency_ms,
        input_tokens = c.input_tokens,
        output_tokens = c.output_tokens,
        provider_request_id = c.provider_request_id,
        model = COALESCE(c.model, attempts.model),
        provider = c.provider,
        provider_model = c.provider_model,
        finish_reason = c.finish_reason,
        cost_nano_usd = c.cost_nano_usd,
        raw_output = c.raw_output
    FROM written CROSS JOIN json_populate_record(NULL::attempts, %(closed)s::json) AS c
    WHERE attempts.job_id = written.job_id AND attempts.attempt_id = c.attempt_id
      AND (attempts.outcome IS NULL
           OR (%(replaces_abandoned)s::boolean AND attempts.outcome = 'abandoned'))
), opened_attempt AS (
    INSERT INTO attempts (
        job_id, attempt_no, attempt_id, worker_id, started_at, tenant_id, task, model
    )
    SELECT written.job_id, o.attempt_no, o.attempt_id, o.worker_id, o.started_at,
        o.tenant_id, o.task, o.model
    FROM written CROSS JOIN json_populate_record(NULL::attempts, %(opened)s::json) AS o
    WHERE o.attempt_id IS NOT NULL
), new_message AS (
    INSERT INTO messages (id, body, tenant_id, sent_at, visible_at, receive_count)
    SELECT %(m_id)s::text, %(m_body)s::text, written.tenant_id, %(m_at)s::float8,
        %(m_at)s::float8, 0
    FROM written
    WHERE %(m_id)s::text IS NOT NULL
), usage AS (
    INSERT INTO tenant_usage (tenant_id, unfinished, stored)
    SELECT written.tenant_id, %(u_unfinished)s::int, %(u_stored)s::int
    FROM written
    WHERE %(u_unfinished)s::int <> 0 OR %(u_stored)s::int <> 0
    ON CONFLICT (tenant_id) DO UPDATE SET
        unfinished = tenant_usage.unfinished + excluded.unfinished,
        stored = tenant_usage.stored + excluded.stored
)

-- name: change_ack
-- The attempt's message, deleted with the terminal write that ends the job (and only
-- if that write was made): the ack commits with the outcome or not at all.
, acked AS (
    DELETE FROM messages USING written
    WHERE messages.id = %(ack_id)s::text AND messages.receipt_token = %(ack_token)s::text
)

-- name: change_result
-- The result the change publishes (ports/store.py's PublishesWithResult), written by the
-- publish's own statement and only if the job row was: durable with the job that
-- references it, never without it. Its key is attempt-specific, so the upsert only ever
-- rewrites this attempt's own bytes (as put_result would on a retried put).
, kept_result AS (
    INSERT INTO results (key, data)
    SELECT %(r_key)s::text, %(r_data)s::bytea FROM written
    WHERE %(r_key)s::text IS NOT NULL
    ON CONFLICT (key) DO UPDATE SET data = excluded.data
)

-- name: change_outcome
SELECT
    w.n AS written,
    CASE WHEN w.n > 0 AND %(m_id)s::text IS NOT NULL
        THEN pg_notify('ferryman_messages', '') END AS woke_receivers,
    CASE WHEN w.n > 0 AND %(stops_running)s::boolean
        THEN pg_notify('ferryman_cancels', '') END AS woke_cancel_checks,
    CASE WHEN w.n > 0 AND %(changes_status)s::boolean
        THEN pg_notify('ferryman_statuses', '') END AS woke_status_watchers
FROM (SELECT count(*) AS n FROM written) AS w;

-- Several jobs' changes in ONE statement (AppliesMany: a worker's claims for one
-- receive batch; or the change statements of one group-commit batch, merged:
-- grouping.py): many_written_by_update (each job row only if its own job still has
-- the revision it expects, expected_revision in its row, whatever became of the
-- others) or many_written_by_insert (new jobs), then many_consequences: what goes with
-- each job row, as in change_consequences, joined to the rows written (done). One parse, one
-- plan, one round trip for the batch instead of one statement each. No two changes
-- are of one job (the caller sends those apart). Returns the ids written. Each JSON set
-- is read once (MATERIALIZED), not once per row it is joined with.

-- name: many_written_by_update
WITH input AS MATERIALIZED (
    SELECT (j.value ->> 'expected_revision')::int AS expected, r.*
    FROM json_array_elements(%(jobs)s::json) AS j
    CROSS JOIN LATERAL json_populate_record(NULL::jobs, j.value) AS r
), done AS (
    UPDATE jobs SET
        status = i.status,
        dispatch_state = i.dispatch_state,
        attempt_count = i.attempt_count,
        failure_count = i.failure_count,
        invalid_output_count = i.invalid_output_count,
        fence = i.fence,
        attempt_id = i.attempt_id,
        worker_id = i.worker_id,
        lease_until = i.lease_until,
        not_before = i.not_before,
        cancel_requested = i.cancel_requested,
        result_ref = i.result_ref,
        error = i.error,
        updated_at = i.updated_at,
        completed_at = i.completed_at,
        revision = i.revision,
        event_seq = i.event_seq,
        deliveries_without_outcome = i.deliveries_without_outcome,
        fallback_level = i.fallback_level,
        webhook_due_at = i.webhook_due_at,
        webhook_attempts = i.webhook_attempts,
        webhook_event_seq = i.webhook_event_seq
    FROM input AS i
    -- The ids again as an array: a JSON set's row count is unknown to the planner, which
    -- would otherwise scan every job to join them; this finds them by the primary key.
    WHERE jobs.job_id = ANY(%(ids)s::text[])
      AND jobs.job_id = i.job_id AND jobs.revision = i.expected
    RETURNING jobs.job_id, jobs.tenant_id
)

-- name: many_written_by_insert
WITH done AS (
    INSERT INTO jobs (
        job_id, tenant_id, idempotency_key, request_hash, task, model, input, metadata,
        payload_version, status, dispatch_state, attempt_count, failure_count,
        invalid_output_count, fence, attempt_id, worker_id, lease_until, not_before,
        cancel_requested, result_ref, error, traceparent, correlation_id, created_at,
        updated_at, completed_at, revision, event_seq, deliveries_without_outcome,
        fallback_level, webhook_url, webhook_due_at, webhook_attempts, webhook_event_seq
    )
    SELECT
        job_id, tenant_id, idempotency_key, request_hash, task, model, input, metadata,
        payload_version, status, dispatch_state, attempt_count, failure_count,
        invalid_output_count, fence, attempt_id, worker_id, lease_until, not_before,
        cancel_requested, result_ref, error, traceparent, correlation_id, created_at,
        updated_at, completed_at, revision, event_seq, deliveries_without_outcome,
        fallback_level, webhook_url, webhook_due_at, webhook_attempts, webhook_event_seq
    FROM json_populate_recordset(NULL::jobs, %(jobs)s::json)
    ON CONFLICT (job_id) DO NOTHING
    RETURNING job_id, tenant_id
)

-- name: many_consequences
, closing AS MATERIALIZED (
    SELECT (j.value ->> 'replaces_abandoned')::boolean AS takeover, r.*
    FROM json_array_elements(%(closed)s::json) AS j
    CROSS JOIN LATERAL json_populate_record(NULL::attempts, j.value) AS r
), new_events AS (
    INSERT INTO events (job_id, seq, at, kind, detail)
    SELECT done.job_id, e.seq, e.at, e.kind, e.detail
    FROM done JOIN json_populate_recordset(NULL::events, %(events)s::json) AS e
        ON e.job_id = done.job_id
), closed_attempt AS (
    -- As close_attempt: an ended attempt keeps its first ending.
    UPDATE attempts SET
        ended_at = c.ended_at,
        outcome = c.outcome,
        failure_class = c.failure_class,
        error_code = c.error_code,
        latency_ms = c.latency_ms,
        input_tokens = c.input_tokens,
        output_tokens = c.output_tokens,
        provider_request_id = c.provider_request_id,
        model = COALESCE(c.model, attempts.model),
        provider = c.provider,
        provider_model = c.provider_model,
        finish_reason = c.finish_reason,
        cost_nano_usd = c.cost_nano_usd,
        raw_output = c.raw_output
    FROM done JOIN closing AS c ON c.job_id = done.job_id
    -- As for the jobs: found by the attempt_id index, not by a scan of every attempt.
    WHERE attempts.attempt_id = ANY(%(closed_ids)s::text[])
      AND attempts.job_id = c.job_id AND attempts.attempt_id = c.attempt_id
      AND (attempts.outcome IS NULL OR (c.takeover AND attempts.outcome = 'abandoned'))
), opened_attempt AS (
    INSERT INTO attempts (
        job_id, attempt_no, attempt_id, worker_id, started_at, tenant_id, task, model
    )
    SELECT done.job_id, o.attempt_no, o.attempt_id, o.worker_id, o.started_at,
        o.tenant_id, o.task, o.model
    FROM done JOIN json_populate_recordset(NULL::attempts, %(opened)s::json) AS o
        ON o.job_id = done.job_id
), new_message AS (
    INSERT INTO messages (id, body, tenant_id, sent_at, visible_at, receive_count)
    SELECT m.id, m.body, done.tenant_id, m.at, m.at, 0
    FROM done JOIN json_to_recordset(%(messages)s::json)
        AS m(job_id text, id text, body text, at float8) ON m.job_id = done.job_id
    RETURNING 1
), usage AS (
    -- One row per tenant (an upsert may not touch one row twice), in tenant order.
    INSERT INTO tenant_usage (tenant_id, unfinished, stored)
    SELECT done.tenant_id, sum(u.unfinished)::int, sum(u.stored)::int
    FROM done JOIN json_to_recordset(%(usage)s::json) AS u(job_id text, unfinished int,
        stored int) ON u.job_id = done.job_id
    GROUP BY done.tenant_id
    ORDER BY done.tenant_id
    ON CONFLICT (tenant_id) DO UPDATE SET
        unfinished = tenant_usage.unfinished + excluded.unfinished,
        stored = tenant_usage.stored + excluded.stored
), kept_result AS (
    -- As change_result: the results the changes publish, with the jobs done.
    INSERT INTO results (key, data)
    SELECT k.key, decode(k.data, 'hex')
    FROM done JOIN json_to_recordset(%(results)s::json) AS k(job_id text, key text, data text)
        ON k.job_id = done.job_id
    ON CONFLICT (key) DO UPDATE SET data = excluded.data
), acked AS (
    -- As change_ack: each message deleted with the terminal write of its job.
    DELETE FROM messages
    USING done JOIN json_to_recordset(%(acks)s::json) AS a(job_id text, id text, token text)
        ON a.job_id = done.job_id
    WHERE messages.id = ANY(%(ack_ids)s::text[])
      AND messages.id = a.id AND messages.receipt_token = a.token
)
SELECT
    d.done,
    CASE WHEN EXISTS (SELECT 1 FROM new_message)
        THEN pg_notify('ferryman_messages', '') END AS woke_receivers,
    CASE WHEN d.done && %(stops)s::text[]
        THEN pg_notify('ferryman_cancels', '') END AS woke_cancel_checks,
    CASE WHEN d.done && %(statuses)s::text[] THEN pg_notify('ferryman_statuses', '') END
FROM (SELECT array_agg(job_id) AS done FROM done) AS d;

-- name: written_by_keyed_insert
-- An accept with an idempotency key, when the key is free: the key's entry, then the
-- job FROM it. A key already taken writes nothing (claimed = 0), and the caller then
-- takes the general path (jobops.create: replay, mismatch or an expired entry).
WITH claimed AS (
    INSERT INTO idempotency (tenant_id, key, job_id, request_hash, expires_at)
    VALUES (
        %(tenant_id)s, %(idempotency_key)s, %(job_id)s, %(request_hash)s,
        %(key_expires_at)s::float8
    )
    ON CONFLICT (tenant_id, key) DO NOTHING
    RETURNING job_id
), written AS (
    INSERT INTO jobs (
        job_id, tenant_id, idempotency_key, request_hash, task, model, input, metadata,
        payload_version, status, dispatch_state, attempt_count, failure_count,
        invalid_output_count, fence, attempt_id, worker_id, lease_until, not_before,
        cancel_requested, result_ref, error, traceparent, correlation_id, created_at,
        updated_at, completed_at, revision, event_seq, deliveries_without_outcome,
        fallback_level, webhook_url, webhook_due_at, webhook_attempts, webhook_event_seq
    )
    SELECT
        %(job_id)s, %(tenant_id)s, %(idempotency_key)s, %(request_hash)s, %(task)s,
        %(model)s, %(input)s, %(metadata)s, %(payload_version)s, %(status)s,
        %(dispatch_state)s, %(attempt_count)s, %(failure_count)s,
        %(invalid_output_count)s, %(fence)s, %(attempt_id)s, %(worker_id)s,
        %(lease_until)s, %(not_before)s, %(cancel_requested)s, %(result_ref)s, %(error)s,
        %(traceparent)s, %(correlation_id)s, %(created_at)s, %(updated_at)s,
        %(completed_at)s, %(revision)s, %(event_seq)s, %(deliveries_without_outcome)s,
        %(fallback_level)s, %(webhook_url)s, %(webhook_due_at)s, %(webhook_attempts)s,
        %(webhook_event_seq)s
    FROM claimed
    ON CONFLICT (job_id) DO NOTHING
    RETURNING job_id, tenant_id
)

-- name: keyed_change_outcome
-- A key claimed for a job whose id was taken must not commit: the division by zero
-- (1 - claimed + written = 0) fails the statement, so the transaction rolls back and the
-- general path runs instead (in a savepoint of its own), as for any refused statement.
SELECT
    w.n AS written,
    c.n AS claimed,
    1 / (1 - c.n + w.n) AS consistent,
    CASE WHEN w.n > 0 AND %(m_id)s::text IS NOT NULL
        THEN pg_notify('ferryman_messages', '') END AS woke_receivers,
    CASE WHEN w.n > 0 AND %(stops_running)s::boolean
        THEN pg_notify('ferryman_cancels', '') END AS woke_cancel_checks,
    CASE WHEN w.n > 0 AND %(changes_status)s::boolean
        THEN pg_notify('ferryman_statuses', '') END AS woke_status_watchers
FROM (SELECT count(*) AS n FROM written) AS w, (SELECT count(*) AS n FROM claimed) AS c;
