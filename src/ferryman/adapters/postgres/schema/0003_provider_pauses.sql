-- A provider's pause says why and since when, whether a worker made it (then it is
-- probed again on a backoff and lifted by itself once a probe passes) and when its next
-- probe is due. Rows an older version writes keep the defaults: an operator's pause,
-- never lifted automatically.

ALTER TABLE control
    ADD COLUMN automatic boolean NOT NULL DEFAULT false,
    ADD COLUMN reason text,
    ADD COLUMN paused_at double precision,
    ADD COLUMN next_probe_at double precision,
    ADD COLUMN probe_interval_seconds double precision;

UPDATE control SET paused_at = updated_at WHERE paused;
