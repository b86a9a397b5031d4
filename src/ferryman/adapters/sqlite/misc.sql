-- Results kept in the database, API keys, and operator switches.

-- name: put_result
INSERT INTO results (key, data) VALUES (:key, :data)
ON CONFLICT (key) DO UPDATE SET data = excluded.data;

-- name: get_result
SELECT data FROM results WHERE key = :key;

-- name: result_sizes_after
SELECT key, length(data) AS size FROM results WHERE key > :after ORDER BY key LIMIT :limit;

-- name: delete_result
DELETE FROM results WHERE key = :key;

-- name: insert_api_key
INSERT INTO api_keys (key_id, tenant_id, secret_hash, admin, created_at, expires_at)
VALUES (:key_id, :tenant_id, :secret_hash, :admin, :created_at, :expires_at);

-- name: get_api_key
SELECT key_id, tenant_id, secret_hash, admin, created_at, expires_at, revoked_at, revoked_by
FROM api_keys
WHERE key_id = :key_id;

-- name: list_api_keys
SELECT key_id, tenant_id, secret_hash, admin, created_at, expires_at, revoked_at, revoked_by
FROM api_keys
ORDER BY created_at, key_id;

-- name: list_tenant_api_keys
SELECT key_id, tenant_id, secret_hash, admin, created_at, expires_at, revoked_at, revoked_by
FROM api_keys
WHERE tenant_id = :tenant_id
ORDER BY created_at, key_id;

-- name: count_other_usable_admin_keys
SELECT COUNT(*) FROM api_keys
WHERE admin = 1 AND key_id != :key_id AND revoked_at IS NULL
  AND (expires_at IS NULL OR expires_at > :now);

-- name: revoke_api_key
UPDATE api_keys SET revoked_at = :now, revoked_by = :actor
WHERE key_id = :key_id AND revoked_at IS NULL;

-- name: paused_switches
SELECT switch FROM control WHERE paused = 1;

-- name: set_switch
INSERT INTO control (switch, paused, actor, updated_at)
VALUES (:switch, :paused, :actor, :updated_at)
ON CONFLICT (switch) DO UPDATE SET
    paused = excluded.paused,
    actor = excluded.actor,
    updated_at = excluded.updated_at;

-- name: insert_audit
INSERT INTO audit (at, actor, action, target, reason)
VALUES (:at, :actor, :action, :target, :reason);

-- name: audit_log
SELECT id, at, actor, action, target, reason FROM audit
WHERE :before IS NULL OR id < :before
ORDER BY id DESC
LIMIT :limit;
