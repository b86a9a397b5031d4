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
-- An operator's flip: a pause is the operator's (never lifted automatically), whatever
-- paused it before; a resume lifts any pause.
INSERT INTO control (switch, paused, actor, updated_at, automatic, reason, paused_at)
VALUES (:switch, :paused, :actor, :updated_at, 0, :reason, :updated_at)
ON CONFLICT (switch) DO UPDATE SET
    paused = excluded.paused,
    actor = excluded.actor,
    updated_at = excluded.updated_at,
    automatic = 0,
    reason = excluded.reason,
    paused_at = excluded.paused_at,
    next_probe_at = NULL,
    probe_interval_seconds = NULL;

-- name: paused_rows
-- Rows written before 0005 have no paused_at: the last flip is when they were paused.
SELECT switch, actor, reason, automatic, COALESCE(paused_at, updated_at) AS since,
       next_probe_at, probe_interval_seconds
FROM control
WHERE paused = 1;

-- name: paused_row
SELECT switch, actor, reason, automatic, COALESCE(paused_at, updated_at) AS since,
       next_probe_at, probe_interval_seconds
FROM control
WHERE switch = :switch AND paused = 1;

-- name: pause_automatically
-- Only a switch that is not paused: an operator's pause stays the operator's, and an
-- automatic one keeps its schedule.
INSERT INTO control (
    switch, paused, actor, updated_at, automatic, reason, paused_at, next_probe_at,
    probe_interval_seconds
)
VALUES (
    :switch, 1, :actor, :since, 1, :reason, :since, :next_probe_at, :probe_interval_seconds
)
ON CONFLICT (switch) DO UPDATE SET
    paused = 1,
    actor = excluded.actor,
    updated_at = excluded.updated_at,
    automatic = 1,
    reason = excluded.reason,
    paused_at = excluded.paused_at,
    next_probe_at = excluded.next_probe_at,
    probe_interval_seconds = excluded.probe_interval_seconds
WHERE control.paused = 0;

-- name: take_probe
-- The one process whose update matches probes; the others find the probe moved on.
UPDATE control
SET next_probe_at = :next_probe_at, probe_interval_seconds = :probe_interval_seconds
WHERE switch = :switch AND paused = 1 AND automatic = 1
  AND next_probe_at IS NOT NULL AND next_probe_at <= :now;

-- name: resume_automatically
-- Only the automatic pause that began at :since: never an operator's, never a later one.
UPDATE control
SET paused = 0, actor = :actor, updated_at = :now, next_probe_at = NULL
WHERE switch = :switch AND paused = 1 AND automatic = 1 AND paused_at = :since;

-- name: insert_audit
INSERT INTO audit (at, actor, action, target, reason)
VALUES (:at, :actor, :action, :target, :reason);

-- name: audit_log
SELECT id, at, actor, action, target, reason FROM audit
WHERE :before IS NULL OR id < :before
ORDER BY id DESC
LIMIT :limit;

-- name: get_webhook_secret
SELECT tenant_id, current, previous, previous_until, created_at
FROM webhook_secrets
WHERE tenant_id = :tenant_id;

-- name: put_webhook_secret
INSERT INTO webhook_secrets (tenant_id, current, previous, previous_until, created_at)
VALUES (:tenant_id, :current, :previous, :previous_until, :created_at)
ON CONFLICT (tenant_id) DO UPDATE SET
    current = excluded.current,
    previous = excluded.previous,
    previous_until = excluded.previous_until,
    created_at = excluded.created_at;
