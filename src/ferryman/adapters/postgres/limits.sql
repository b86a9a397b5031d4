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

-- name: provider_member_last_seen
SELECT seen_at FROM provider_limit_members
WHERE provider = %(provider)s AND model = %(model)s AND member = %(member)s;

-- name: provider_member_seen
INSERT INTO provider_limit_members (provider, model, member, seen_at)
VALUES (%(provider)s, %(model)s, %(member)s, %(now)s)
ON CONFLICT (provider, model, member) DO UPDATE
SET seen_at = GREATEST(provider_limit_members.seen_at, excluded.seen_at);

-- name: provider_members_forget
-- Members long gone (a hundred times the liveness horizon) are deleted for good.
DELETE FROM provider_limit_members
WHERE provider = %(provider)s AND model = %(model)s AND seen_at < %(forget_before)s;

-- name: provider_members_live
SELECT count(*) AS live FROM provider_limit_members
WHERE provider = %(provider)s AND model = %(model)s AND seen_at >= %(live_since)s;

-- name: provider_report
-- One decrease per epoch: a throttle reported under the current epoch halves the
-- window (and lowers the rate), each by its process's factor, and advances the epoch; reports of the same
-- overload from other processes then carry the old epoch and change nothing. Growth
-- adds up, and a process that joins (or comes back) adds its starting window, capped
-- at %(max_total)s.
INSERT INTO provider_limits AS p (provider, model, window_calls, rate, epoch, updated_at)
VALUES (%(provider)s, %(model)s, %(start_window)s, %(learned_total)s::float8, 0, %(now)s)
ON CONFLICT (provider, model) DO UPDATE SET
    window_calls = CASE
        WHEN p.epoch = %(throttled_epoch)s::int AND %(narrowed_window)s
            THEN GREATEST(1.0, p.window_calls * %(window_factor)s)
        ELSE LEAST(%(max_total)s, p.window_calls + %(grown_window)s + %(joined_window)s)
    END,
    rate = CASE
        WHEN p.epoch = %(throttled_epoch)s::int AND %(lowered_rate)s
            THEN CASE WHEN p.rate IS NULL THEN %(learned_total)s::float8
                      ELSE GREATEST(%(min_rate)s, p.rate * %(rate_factor)s) END
        WHEN p.rate IS NULL THEN NULL
        ELSE p.rate + %(grown_rate)s
    END,
    epoch = p.epoch + CASE
        WHEN p.epoch = %(throttled_epoch)s::int AND (%(narrowed_window)s OR %(lowered_rate)s) THEN 1
        ELSE 0
    END,
    updated_at = %(now)s
RETURNING window_calls, rate, epoch;
