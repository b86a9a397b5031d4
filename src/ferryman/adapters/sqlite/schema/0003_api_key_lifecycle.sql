-- 0003: API keys can expire and be revoked; who revoked a key, and when, is kept.

ALTER TABLE api_keys ADD COLUMN expires_at REAL;
ALTER TABLE api_keys ADD COLUMN revoked_at REAL;
ALTER TABLE api_keys ADD COLUMN revoked_by TEXT;

CREATE INDEX IF NOT EXISTS api_keys_by_tenant ON api_keys (tenant_id, created_at);
