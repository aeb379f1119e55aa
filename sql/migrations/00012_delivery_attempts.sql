-- What a support engineer needs to answer "why did Ada not get it" without
-- logs: which provider answered each delivery, and every failed attempt with
-- its time, error and provider.
--
-- provider is written by the settle that records an outcome (sent or not):
-- the server or service that answered last (one of several SMTP relays, for
-- instance). Null: the channel does not say, or nothing answered.
--
-- notify_delivery_attempts holds FAILED attempts only. A successful send, the
-- common case, writes nothing here: its outcome is the delivery row itself.
-- A delivery that failed twice and then went out has two rows. Rows go with
-- their delivery (retention, erasure) through the foreign key.

-- +goose Up
ALTER TABLE notify_deliveries ADD COLUMN provider text;

CREATE TABLE notify_delivery_attempts (
    delivery_id uuid NOT NULL REFERENCES notify_deliveries (id) ON DELETE CASCADE,
    attempt     integer NOT NULL,
    at          timestamptz NOT NULL,
    error       text NOT NULL,
    provider    text
);
CREATE INDEX notify_delivery_attempts_delivery_idx ON notify_delivery_attempts (delivery_id, attempt);

-- +goose Down
DROP TABLE notify_delivery_attempts;
ALTER TABLE notify_deliveries DROP COLUMN provider;
