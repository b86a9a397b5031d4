-- 0005: a provider's pause says why and since when, whether a worker made it (then it
-- is probed again on a backoff and lifted by itself once a probe passes) and when its
-- next probe is due. Rows an older version writes keep the defaults: an operator's
-- pause, never lifted automatically.

ALTER TABLE control ADD COLUMN automatic INTEGER NOT NULL DEFAULT 0;
ALTER TABLE control ADD COLUMN reason TEXT;
ALTER TABLE control ADD COLUMN paused_at REAL;
ALTER TABLE control ADD COLUMN next_probe_at REAL;
ALTER TABLE control ADD COLUMN probe_interval_seconds REAL;

UPDATE control SET paused_at = updated_at WHERE paused = 1;
