-- Idempotency keys are per tenant: (tenant, notifier, key) is one
-- notification, a notification sent with no tenant in a space of its own, so
-- a key one tenant used neither blocks nor reveals the same key in another.
--
-- notify_api_limits holds the HTTP API's size limits the SQL API enforces as
-- well (http.max_topics, http.max_body), which the daemon publishes with its
-- catalog; the values here are the config's defaults, for a database that
-- was migrated but has not seen a daemon yet.
--
-- A notification or fan-out job scheduled at an infinite time (send_at
-- '-infinity' or 'infinity', which notify_send refuses from now on) stops
-- River's fetch and rescuer and breaks the reads that show it: such rows are
-- moved to now, and send_at may no longer be infinite.

-- +goose Up
CREATE UNIQUE INDEX notify_notifications_tenant_notifier_key
    ON notify_notifications ((coalesce(tenant, '')), notifier, key);
ALTER TABLE notify_notifications DROP CONSTRAINT notify_notifications_notifier_key;

CREATE TABLE notify_api_limits (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    max_topics integer NOT NULL CHECK (max_topics > 0),
    max_body   bigint NOT NULL CHECK (max_body > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO notify_api_limits (max_topics, max_body) VALUES (100, 1048576);

-- River's tables are created after notifyd's on a new database.
-- +goose StatementBegin
DO $$
BEGIN
    IF to_regclass('river_job') IS NOT NULL THEN
        UPDATE river_job SET scheduled_at = now() WHERE NOT isfinite(scheduled_at);
    END IF;
END
$$;
-- +goose StatementEnd
UPDATE notify_notifications SET send_at = now(), updated_at = now() WHERE NOT isfinite(send_at);
ALTER TABLE notify_notifications ADD CONSTRAINT notify_notifications_send_at_finite CHECK (isfinite(send_at));

-- +goose Down
ALTER TABLE notify_notifications DROP CONSTRAINT notify_notifications_send_at_finite;
DROP TABLE notify_api_limits;
ALTER TABLE notify_notifications ADD CONSTRAINT notify_notifications_notifier_key UNIQUE (notifier, key);
DROP INDEX notify_notifications_tenant_notifier_key;
