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

-- name: set_switch
-- An operator's flip: a pause is the operator's (never lifted automatically), whatever
-- paused it before; a resume lifts any pause.
INSERT INTO control (switch, paused, actor, updated_at, automatic, reason, paused_at)
VALUES (%(switch)s, %(paused)s, %(actor)s, %(updated_at)s, false, %(reason)s, %(updated_at)s)
ON CONFLICT (switch) DO UPDATE SET
    paused = excluded.paused,
    actor = excluded.actor,
    updated_at = excluded.updated_at,
    automatic = false,
    reason = excluded.reason,
    paused_at = excluded.paused_at,
    next_probe_at = NULL,
    probe_interval_seconds = NULL;

-- name: paused_rows
-- Rows written before 0003 have no paused_at: the last flip is when they were paused.
SELECT switch, actor, reason, automatic, COALESCE(paused_at, updated_at) AS since,
       next_probe_at, probe_interval_seconds
FROM control
WHERE paused;

-- name: pause_automatically
-- Only a switch that is not paused: an operator's pause stays the operator's, and an
-- automatic one keeps its schedule. A row comes back only when this wrote it.
INSERT INTO control (
    switch, paused, actor, updated_at, automatic, reason, paused_at, next_probe_at,
    probe_interval_seconds
)
VALUES (
    %(switch)s, true, %(actor)s, %(since)s, true, %(reason)s, %(since)s, %(next_probe_at)s,
    %(probe_interval_seconds)s
)
ON CONFLICT (switch) DO UPDATE SET
    paused = true,
    actor = excluded.actor,
    updated_at = excluded.updated_at,
    automatic = true,
    reason = excluded.reason,
    paused_at = excluded.paused_at,
    next_probe_at = excluded.next_probe_at,
    probe_interval_seconds = excluded.probe_interval_seconds
WHERE NOT control.paused
RETURNING switch;

-- name: take_probe
-- The one process whose update matches probes; the others find the probe moved on.
UPDATE control
SET next_probe_at = %(next_probe_at)s, probe_interval_seconds = %(probe_interval_seconds)s
WHERE switch = %(switch)s AND paused AND automatic
  AND next_probe_at IS NOT NULL AND next_probe_at <= %(now)s
RETURNING switch, actor, reason, automatic, COALESCE(paused_at, updated_at) AS since,
          next_probe_at, probe_interval_seconds;

-- name: resume_automatically
-- Only the automatic pause that began at since: never an operator's, never a later one.
UPDATE control
SET paused = false, actor = %(actor)s, updated_at = %(now)s, next_probe_at = NULL
WHERE switch = %(switch)s AND paused AND automatic AND paused_at = %(since)s
RETURNING switch;

-- name: insert_audit
INSERT INTO audit (at, actor, action, target, reason)
VALUES (%(at)s, %(actor)s, %(action)s, %(target)s, %(reason)s);

-- name: audit_log
SELECT id, at, actor, action, target, reason FROM audit
WHERE %(before)s::bigint IS NULL OR id < %(before)s
ORDER BY id DESC
LIMIT %(limit)s;

-- name: get_webhook_secret
SELECT tenant_id, current, previous, previous_until, created_at
FROM webhook_secrets
WHERE tenant_id = %(tenant_id)s;

-- name: put_webhook_secret
INSERT INTO webhook_secrets (tenant_id, current, previous, previous_until, created_at)
VALUES (%(tenant_id)s, %(current)s, %(previous)s, %(previous_until)s, %(created_at)s)
ON CONFLICT (tenant_id) DO UPDATE SET
    current = excluded.current,
    previous = excluded.previous,
    previous_until = excluded.previous_until,
    created_at = excluded.created_at;
