-- The job queue: SQS semantics on a table in the same database as the jobs.

-- name: insert_message
INSERT INTO messages (id, body, tenant_id, sent_at, visible_at, receive_count)
VALUES (%(id)s, %(body)s, %(tenant_id)s, %(sent_at)s, %(visible_at)s, 0);

-- name: notify_messages
-- Wakes idle receivers in every process; delivered only if the transaction commits.
SELECT pg_notify('ferryman_messages', '');

-- name: next_tenants
-- Distinct tenants with messages, in byte order after %(after)s (NULL: from the first),
-- without scanning every message: each step is one seek in messages_tenant_visible.
WITH RECURSIVE tenants(tenant_id) AS (
    (
        SELECT tenant_id FROM messages
        WHERE %(after)s::text IS NULL OR tenant_id > %(after)s
        ORDER BY tenant_id
        LIMIT 1
    )
    UNION ALL
    SELECT (
        SELECT m.tenant_id FROM messages AS m
        WHERE m.tenant_id > tenants.tenant_id
        ORDER BY m.tenant_id
        LIMIT 1
    )
    FROM tenants
    WHERE tenants.tenant_id IS NOT NULL
)
SELECT tenant_id FROM tenants WHERE tenant_id IS NOT NULL LIMIT %(limit)s;

-- name: visible_of_tenants
-- For each tenant its first visible messages, up to that tenant's allowance. A plain
-- read: only the ones the fair pick takes are then locked (lock_picked), so a receive
-- never holds messages it will not deliver and other receivers find them free.
SELECT m.id, m.tenant_id, m.visible_at
FROM unnest(%(tenants)s::text[], %(allowances)s::int[]) AS t(tenant_id, allowance)
CROSS JOIN LATERAL (
    SELECT id, tenant_id, visible_at, seq
    FROM messages
    -- In the column's collation, so the (tenant_id, visible_at, seq) index serves it.
    WHERE messages.tenant_id = t.tenant_id COLLATE "C"
      AND visible_at <= %(now)s
      AND NOT (id = ANY(%(taken)s::text[]))
    ORDER BY visible_at, seq
    LIMIT t.allowance
) AS m;

-- name: lock_picked
-- The picked messages that are still visible, locked for this receive; one another
-- receiver holds (or took a moment ago) is skipped, never waited for.
SELECT id, body, tenant_id, sent_at, visible_at, seq, receive_count
FROM messages
WHERE id = ANY(%(ids)s::text[]) AND visible_at <= %(now)s
FOR UPDATE SKIP LOCKED;

-- name: any_visible
-- The earliest deadline, one seek in messages_visible however many messages wait (a
-- filter with LIMIT 1 would scan them all when none is visible, an idle queue's case).
SELECT 1 WHERE (SELECT MIN(visible_at) FROM messages) <= %(now)s;

-- name: mark_received
-- Every message one receive delivers, in one statement: each gets its own token.
UPDATE messages AS m SET
    visible_at = %(visible_at)s,
    receive_count = m.receive_count + 1,
    receipt_token = r.token,
    first_received_at = COALESCE(m.first_received_at, %(now)s)
FROM unnest(%(ids)s::text[], %(tokens)s::text[]) AS r(id, token)
WHERE m.id = r.id;

-- name: dead_letter
-- Moves the message: it leaves the queue in the statement that files it.
WITH moved AS (
    DELETE FROM messages WHERE id = %(id)s
    RETURNING id, body, sent_at, receive_count
)
INSERT INTO dead_letters (
    id, message_id, body, sent_at, receive_count, dead_lettered_at, reason, job_id
)
SELECT %(dead_letter_id)s, id, body, sent_at, receive_count, %(now)s, %(reason)s, %(job_id)s
FROM moved;

-- name: change_visibility
UPDATE messages SET visible_at = %(visible_at)s
WHERE id = %(id)s AND receipt_token = %(token)s;

-- name: delete_message
DELETE FROM messages WHERE id = %(id)s AND receipt_token = %(token)s;

-- name: list_dead_letters
-- Letters of job messages only: an undecodable one names no job, and stays for an
-- operator without blocking the letters behind it.
SELECT id, body, receive_count, dead_lettered_at, reason
FROM dead_letters
WHERE job_id IS NOT NULL
ORDER BY dead_lettered_at, seq
LIMIT %(limit)s;

-- name: delete_dead_letter
DELETE FROM dead_letters WHERE id = %(id)s;

-- name: undecodable_letters
-- The letters whose body names no job, for an operator, oldest first.
SELECT id, body, sent_at, receive_count, dead_lettered_at
FROM dead_letters
WHERE job_id IS NULL
  AND (%(after_at)s::float8 IS NULL
       OR (dead_lettered_at, id) > (%(after_at)s::float8, %(after_id)s::text))
ORDER BY dead_lettered_at, id
LIMIT %(limit)s;

-- name: undecodable_letter
SELECT id, body, sent_at, receive_count, dead_lettered_at
FROM dead_letters
WHERE id = %(id)s AND job_id IS NULL;

-- name: delete_undecodable_letter
DELETE FROM dead_letters WHERE id = %(id)s AND job_id IS NULL;

-- name: message_stats
SELECT
    COUNT(*) FILTER (WHERE visible_at <= %(now)s) AS visible,
    COUNT(*) FILTER (WHERE visible_at > %(now)s) AS in_flight,
    MIN(sent_at) AS oldest_sent_at,
    (SELECT COUNT(*) FROM dead_letters) AS dead_letters,
    (SELECT COUNT(*) FROM dead_letters WHERE job_id IS NULL) AS undecodable_letters
FROM messages;
