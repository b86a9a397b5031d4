-- Results kept in the database, API keys, and operator switches.

-- name: put_result
INSERT INTO results (key, data) VALUES (%(key)s, %(data)s)
ON CONFLICT (key) DO UPDATE SET data = excluded.data;

-- name: get_result
SELECT data FROM results WHERE key = %(key)s;

-- name: result_sizes_after
SELECT key, octet_length(data) AS size FROM results
WHERE key > %(after)s
ORDER BY key
LIMIT %(limit)s;

-- name: delete_results
DELETE FROM results WHERE key = ANY(%(keys)s::text[]);

-- name: delete_result
DELETE FROM results WHERE key = %(key)s;

-- name: insert_api_key
INSERT INTO api_keys (key_id, tenant_id, secret_hash, admin, created_at, expires_at)
VALUES (%(key_id)s, %(tenant_id)s, %(secret_hash)s, %(admin)s, %(created_at)s, %(expires_at)s)
ON CONFLICT (key_id) DO NOTHING;

-- name: get_api_key
SELECT key_id, tenant_id, secret_hash, admin, created_at, expires_at, revoked_at, revoked_by
FROM api_keys
WHERE key_id = %(key_id)s;

-- name: list_api_keys
SELECT key_id, tenant_id, secret_hash, admin, created_at, expires_at, revoked_at, revoked_by
FROM api_keys
ORDER BY created_at, key_id;

-- name: list_tenant_api_keys
SELECT key_id, tenant_id, secret_hash, admin, created_at, expires_at, revoked_at, revoked_by
FROM api_keys
WHERE tenant_id = %(tenant_id)s
ORDER BY created_at, key_id;

-- name: lock_key_revocations
-- Revocations of admin keys take turns, so two of them cannot each leave the other
-- as "the remaining admin key" and lock everyone out.
SELECT pg_advisory_xact_lock(hashtext('ferryman.api_keys.revoke_admin'));

-- name: count_other_usable_admin_keys
SELECT COUNT(*) AS n FROM api_keys
WHERE admin AND revoked_at IS NULL AND key_id <> %(key_id)s
  AND (expires_at IS NULL OR expires_at > %(now)s);

-- name: revoke_api_key
UPDATE api_keys SET revoked_at = %(now)s, revoked_by = %(actor)s
WHERE key_id = %(key_id)s AND revoked_at IS NULL;

-- name: paused_switches
SELECT switch FROM control WHERE paused;

-- name: set_switch
INSERT INTO control (switch, paused, actor, updated_at)
VALUES (%(switch)s, %(paused)s, %(actor)s, %(updated_at)s)
ON CONFLICT (switch) DO UPDATE SET
    paused = excluded.paused,
    actor = excluded.actor,
    updated_at = excluded.updated_at;

-- name: insert_audit
INSERT INTO audit (at, actor, action, target, reason)
VALUES (%(at)s, %(actor)s, %(action)s, %(target)s, %(reason)s);

-- name: audit_log
SELECT id, at, actor, action, target, reason FROM audit
WHERE %(before)s::bigint IS NULL OR id < %(before)s
ORDER BY id DESC
LIMIT %(limit)s;
