-- Migrations, the server's own questions, and statements that name an identifier
-- (a database, a channel): those are composed with psycopg.sql.Identifier, never
-- formatted as text.

-- name: create_ledger
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at double precision NOT NULL
);

-- name: ledger_exists
SELECT to_regclass('schema_migrations') IS NOT NULL;

-- name: schema_version
SELECT COALESCE(MAX(version), 0) FROM schema_migrations;

-- name: lock_migrations
SELECT pg_advisory_xact_lock(%(lock_id)s);

-- name: record_migration
INSERT INTO schema_migrations (version, name, applied_at)
VALUES (%(version)s, %(name)s, %(applied_at)s);

-- name: why_unwritable
SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on',
       current_user, has_schema_privilege(current_schema(), 'CREATE'),
       CASE WHEN %(migrated)s THEN has_table_privilege('jobs', 'INSERT, UPDATE, DELETE') END;

-- name: create_database
CREATE DATABASE {database};

-- name: listen
LISTEN {channel};
