-- Limits shared by every process: token buckets leased in batches, in-flight counts.

-- name: lease_tokens
-- Refill the bucket for the time since it was last touched (a clock that steps back
-- mints nothing), then grant up to %(want)s whole tokens: one atomic upsert, so
-- concurrent leases from many processes each see the other's spend.
INSERT INTO rate_buckets AS b (key, tokens, refreshed_at, granted)
VALUES (
    %(key)s,
    %(burst)s::float8 - LEAST(%(want)s, %(burst)s),
    %(now)s,
    LEAST(%(want)s, %(burst)s)
)
ON CONFLICT (key) DO UPDATE SET
    tokens = LEAST(%(burst)s::float8, b.tokens + GREATEST(0, %(now)s - b.refreshed_at) * %(rate)s)
        - LEAST(%(want)s, GREATEST(0, floor(
            LEAST(%(burst)s::float8, b.tokens + GREATEST(0, %(now)s - b.refreshed_at) * %(rate)s)
        )))::int,
    refreshed_at = GREATEST(b.refreshed_at, %(now)s),
    granted = LEAST(%(want)s, GREATEST(0, floor(
        LEAST(%(burst)s::float8, b.tokens + GREATEST(0, %(now)s - b.refreshed_at) * %(rate)s)
    )))::int
RETURNING tokens, granted;

-- name: tenants_in_flight
-- How many messages each tenant has received and not yet finished, in every process:
-- hidden by a receive (a receipt) and not yet visible again. One range of the
-- (tenant_id, visible_at, seq) index per tenant.
SELECT t.tenant_id, (
    SELECT count(*) FROM messages AS m
    WHERE m.tenant_id = t.tenant_id COLLATE "C"
      AND m.visible_at > %(now)s
      AND m.receipt_token IS NOT NULL
) AS held
FROM unnest(%(tenants)s::text[]) AS t(tenant_id);
