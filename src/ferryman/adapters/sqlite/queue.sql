-- The job queue: SQS semantics on a table in the same file as the jobs.

-- name: insert_message
INSERT INTO messages (id, body, sent_at, visible_at, receive_count)
VALUES (:id, :body, :sent_at, :visible_at, 0);

-- name: visible_messages
SELECT id, body, sent_at, receive_count
FROM messages
WHERE visible_at <= :now
ORDER BY sent_at, rowid
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
INSERT INTO dead_letters (id, message_id, body, sent_at, receive_count, dead_lettered_at)
SELECT :dead_letter_id, id, body, sent_at, receive_count, :now
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
SELECT id, body, receive_count, dead_lettered_at
FROM dead_letters
ORDER BY dead_lettered_at, rowid
LIMIT :limit;

-- name: delete_dead_letter
DELETE FROM dead_letters WHERE id = :id;

-- name: message_stats
SELECT
    COALESCE(SUM(visible_at <= :now), 0) AS visible,
    COALESCE(SUM(visible_at > :now), 0) AS in_flight,
    MIN(sent_at) AS oldest_sent_at
FROM messages;

-- name: dead_letter_count
SELECT COUNT(*) AS n FROM dead_letters;
