-- What happened to a message after notifyd handed it over: the events a
-- provider reports through POST /v1/providers/{kind}/events (delivered,
-- deferred, bounced, complained, opened, clicked, unsubscribed, dropped),
-- one row each, appended and never updated. A delivery's status moves on
-- from `sent` to `delivered`, `bounced` or `complained` with them.
--
-- The table is partitioned like notify_delivery_attempts, by notification
-- id, one partition per partition of notify_deliveries with the same bounds
-- and suffix: retention drops a month's events with its deliveries
-- (notify_ledger_drop_before), notify_ledger_extend makes the months ahead.
-- There is no foreign key to the partitioned ledger; the statements that
-- delete delivery rows delete their events too (stores/retention.go,
-- stores/erase.go, the erasure trigger).
--
-- event_key is the provider's own id of the event (an SNS MessageId and the
-- recipient, SendGrid's sg_event_id, Mailgun's event id, a Twilio message
-- sid and its status...): the unique index makes an event posted twice
-- (a provider's retry, a replay) write nothing the second time. It includes
-- notification_id because a partitioned table's unique index must; a
-- delivery lives in one partition, so it is unique per delivery.
--
-- provider_message_id gets an index: it is how an event that carries no
-- delivery tag names its message.

-- +goose Up
CREATE TABLE notify_delivery_events (
    delivery_id     uuid NOT NULL,
    notification_id uuid NOT NULL,
    type            text NOT NULL CHECK (type IN ('delivered', 'deferred', 'bounced', 'complained', 'opened',
                                                  'clicked', 'unsubscribed', 'dropped')),
    at              timestamptz NOT NULL,
    -- the provider kind that reported it: ses, sendgrid, postmark, mailgun, twilio
    source          text NOT NULL,
    -- what the provider said: a bounce's kind and diagnostic, a clicked URL
    detail          text NOT NULL DEFAULT '' CHECK (octet_length(detail) <= 2000),
    event_key       text NOT NULL CHECK (octet_length(event_key) BETWEEN 1 AND 300),
    -- a machine (a mail privacy proxy, a link scanner) opened or clicked
    machine         boolean NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now()
) PARTITION BY RANGE (notification_id);

-- +goose StatementBegin
DO $$
DECLARE
    p record;
BEGIN
    FOR p IN
        SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'notify_deliveries'::regclass
    LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF notify_delivery_events %s',
                       'notify_delivery_events_' || substr(p.relname, length('notify_deliveries_') + 1), p.bound);
    END LOOP;
END
$$;
-- +goose StatementEnd

CREATE UNIQUE INDEX notify_delivery_events_key ON notify_delivery_events (notification_id, delivery_id, event_key);
CREATE INDEX notify_delivery_events_delivery_idx ON notify_delivery_events (delivery_id, at);
CREATE INDEX notify_deliveries_provider_message_idx ON notify_deliveries (provider_message_id)
    WHERE provider_message_id IS NOT NULL;

-- +goose Down
DROP INDEX notify_deliveries_provider_message_idx;
DROP TABLE notify_delivery_events;
