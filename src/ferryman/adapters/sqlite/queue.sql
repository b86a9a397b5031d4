-- The job queue: SQS semantics on a table in the same file as the jobs.

-- name: insert_message
INSERT INTO messages (id, body, tenant_id, sent_at, visible_at, receive_count)
VALUES (:id, :body, :tenant_id, :sent_at, :visible_at, 0);

-- name: next_tenants
-- Distinct tenants with messages, in name order after :after (NULL: from the first),
-- without scanning every message: each step is one seek in messages_tenant_visible.
WITH RECURSIVE tenants(tenant_id) AS (
    SELECT (SELECT MIN(tenant_id) FROM messages WHERE :after IS NULL OR tenant_id > :after)
    UNION ALL
    SELECT (SELECT MIN(tenant_id) FROM messages WHERE tenant_id > tenants.tenant_id)
    FROM tenants
    WHERE tenants.tenant_id IS NOT NULL
)
SELECT tenant_id FROM tenants WHERE tenant_id IS NOT NULL LIMIT :limit;

-- name: visible_of_tenant
SELECT id, body, tenant_id, sent_at, visible_at, receive_count
FROM messages
WHERE tenant_id = :tenant_id AND visible_at <= :now
ORDER BY visible_at, rowid
LIMIT :limit;

-- name: any_visible
SELECT 1 FROM messages WHERE visible_at <= :now LIMIT 1;

-- name: mark_received
UPDATE messages SET
    visible_at = :visible_at,
    receive_count = receive_count + 1,
    receipt_token = :token,
    first_received_at = COALESCE(first_received_at, :now)
WHERE id = :id;

-- name: copy_to_dead_letters
INSERT INTO dead_letters (
    id, message_id, body, sent_at, receive_count, dead_lettered_at, reason, job_id
)
SELECT :dead_letter_id, id, body, sent_at, receive_count, :now, :reason, :job_id
FROM messages
WHERE id = :id;

-- name: delete_message_by_id
DELETE FROM messages WHERE id = :id;

-- name: change_visibility
UPDATE messages SET visible_at = :visible_at
WHERE id = :id AND receipt_token = :token;

-- name: delete_message
DELETE FROM messages WHERE id = :id AND receipt_token = :token;

-- name: list_dead_letters
-- Letters of job messages only: an undecodable one names no job, and stays for an
-- operator without blocking the letters behind it.
SELECT id, body, receive_count, dead_lettered_at, reason
FROM dead_letters
WHERE job_id IS NOT NULL
ORDER BY dead_lettered_at, rowid
LIMIT :limit;

-- name: delete_dead_letter
DELETE FROM dead_letters WHERE id = :id;

-- name: undecodable_letters
-- The letters whose body names no job, for an operator, oldest first.
SELECT id, body, sent_at, receive_count, dead_lettered_at
FROM dead_letters
WHERE job_id IS NULL
  AND (:after_at IS NULL
       OR dead_lettered_at > :after_at
       OR (dead_lettered_at = :after_at AND id > :after_id))
ORDER BY dead_lettered_at, id
LIMIT :limit;

-- name: undecodable_letter
SELECT id, body, sent_at, receive_count, dead_lettered_at
FROM dead_letters
WHERE id = :id AND job_id IS NULL;

-- name: delete_undecodable_letter
DELETE FROM dead_letters WHERE id = :id AND job_id IS NULL;

-- name: message_stats
SELECT
    COALESCE(SUM(visible_at <= :now), 0) AS visible,
    COALESCE(SUM(visible_at > :now), 0) AS in_flight,
    MIN(sent_at) AS oldest_sent_at
FROM messages;

-- name: dead_letter_count
SELECT COUNT(*) AS n, COALESCE(SUM(job_id IS NULL), 0) AS undecodable FROM dead_letters;
