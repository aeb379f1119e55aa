-- The audit log: a row per change made through the admin API, the console
-- or the CLI, written in the change's own transaction. Rows are never
-- updated, and deleted only once older than 30 days (the trigger of
-- sql/functions/notify_audit_append_only.sql); the application role
-- (notifyd_app) has no right on the table at all.

-- +goose Up
CREATE TABLE notify_audit (
    id         uuid PRIMARY KEY,
    at         timestamptz NOT NULL,
    actor      text NOT NULL,
    actor_kind text NOT NULL,
    action     text NOT NULL,
    object     text NOT NULL DEFAULT '',
    summary    jsonb NOT NULL DEFAULT '{}',
    ip         text NOT NULL DEFAULT ''
);
CREATE INDEX notify_audit_at ON notify_audit (at, id);
REVOKE ALL ON notify_audit FROM PUBLIC;

-- +goose Down
DROP TABLE notify_audit;
