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
-- their delivery through the foreign key (retention), and when a recipient is
-- erased, their delivery rows are pseudonymised (the recipient column
-- changes): the trigger below deletes those rows' attempts, whose errors may
-- name the address. Settles never set the recipient column, so the trigger
-- costs them nothing.

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

-- +goose StatementBegin
CREATE FUNCTION notify_delivery_attempts_forget() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM notify_delivery_attempts WHERE delivery_id = NEW.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION notify_delivery_attempts_forget() SET search_path = %I, pg_temp', current_schema());
END
$$;
-- +goose StatementEnd
CREATE TRIGGER notify_deliveries_forget_attempts
    AFTER UPDATE OF recipient ON notify_deliveries
    FOR EACH ROW WHEN (OLD.recipient IS DISTINCT FROM NEW.recipient)
    EXECUTE FUNCTION notify_delivery_attempts_forget();

-- +goose Down
DROP TRIGGER notify_deliveries_forget_attempts ON notify_deliveries;
DROP FUNCTION notify_delivery_attempts_forget();
DROP TABLE notify_delivery_attempts;
ALTER TABLE notify_deliveries DROP COLUMN provider;
