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

-- The concurrency window and learned request rate of every worker process calling one
-- (provider, model), summed: each process paces itself at its share (divided by the
-- live members below). A throttle halves the window once per epoch, however many
-- processes report it (docs/design-notes.md, "Shared provider limits").
CREATE TABLE provider_limits (
    provider   text COLLATE "C" NOT NULL,
    model      text COLLATE "C" NOT NULL,
    window_calls double precision NOT NULL,
    rate       double precision,
    epoch      integer NOT NULL DEFAULT 0,
    updated_at double precision NOT NULL,
    PRIMARY KEY (provider, model)
);

-- Worker processes calling a (provider, model), by when each last reported: one not
-- heard from for a few report intervals is gone, and the others' shares grow.
CREATE TABLE provider_limit_members (
    provider text COLLATE "C" NOT NULL,
    model    text COLLATE "C" NOT NULL,
    member   text COLLATE "C" NOT NULL,
    seen_at  double precision NOT NULL,
    PRIMARY KEY (provider, model, member)
);
