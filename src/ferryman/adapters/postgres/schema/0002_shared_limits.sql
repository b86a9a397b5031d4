-- Limits that hold across every process and machine (docs/postgres.md).

-- One token bucket per key (an API budget and a tenant). API processes lease tokens
-- from it in small batches with one conditional UPDATE, so N processes together never
-- admit more than the one bucket allows.
CREATE TABLE rate_buckets (
    key          text COLLATE "C" PRIMARY KEY,
    tokens       double precision NOT NULL,
    refreshed_at double precision NOT NULL,
    -- What the last lease granted, so the statement can return it beside the balance.
    granted      integer NOT NULL DEFAULT 0
);
